"""The Go repository session B's coding agent works in: file contents and tool output.

``throttle`` is a small rate-limiting library (token bucket today, sliding window being added).
Files are hand-written; the session reads them, patches them and reads them again.
"""

from __future__ import annotations

import random

LIMITER_GO = '''\
// Package throttle implements rate limiters that share one Limiter interface,
// backed by process memory or by Redis for limits shared across replicas.
package throttle

import (
\t"context"
\t"errors"
\t"fmt"
\t"time"
)

// Decision is the outcome of one Allow call.
type Decision struct {
\tAllowed    bool          // the request may proceed
\tRemaining  int64         // permits left in the current period
\tRetryAfter time.Duration // when Allowed is false: how long until a permit frees up
\tResetAt    time.Time     // when the limiter is back to full capacity
}

// Limiter is implemented by every algorithm in this package.
type Limiter interface {
\t// Allow takes one permit for key if one is available.
\tAllow(ctx context.Context, key string) (Decision, error)
\t// Close releases background goroutines and connections.
\tClose() error
}

// Options configure a limiter. Zero values take the documented defaults.
type Options struct {
\tRate   int64         // permits per Period
\tPeriod time.Duration // defaults to one second
\tBurst  int64         // bucket size; defaults to Rate
\tClock  Clock         // defaults to the wall clock
\tStore  Store         // defaults to an in-memory store
}

// ErrInvalidRate is returned by constructors when Rate is not positive.
var ErrInvalidRate = errors.New("throttle: rate must be positive")

func (o *Options) normalize() error {
\tif o.Rate <= 0 {
\t\treturn ErrInvalidRate
\t}
\tif o.Period <= 0 {
\t\to.Period = time.Second
\t}
\tif o.Burst <= 0 {
\t\to.Burst = o.Rate
\t}
\tif o.Clock == nil {
\t\to.Clock = wallClock{}
\t}
\tif o.Store == nil {
\t\to.Store = newMemoryStore(o.Clock)
\t}
\treturn nil
}

// Clock is the source of time; tests swap in a manual clock.
type Clock interface {
\tNow() time.Time
}

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

// KeyFunc derives the limiter key from a request-scoped value.
type KeyFunc func(ctx context.Context) (string, bool)

// Middleware wraps fn so that calls over the limit return a *LimitedError.
func Middleware(l Limiter, key KeyFunc, fn func(ctx context.Context) error) func(context.Context) error {
\treturn func(ctx context.Context) error {
\t\tk, ok := key(ctx)
\t\tif !ok {
\t\t\treturn fn(ctx)
\t\t}
\t\td, err := l.Allow(ctx, k)
\t\tif err != nil {
\t\t\treturn fmt.Errorf("throttle: allow %q: %w", k, err)
\t\t}
\t\tif !d.Allowed {
\t\t\treturn &LimitedError{Key: k, RetryAfter: d.RetryAfter}
\t\t}
\t\treturn fn(ctx)
\t}
}

// LimitedError reports a rejected call and when to retry.
type LimitedError struct {
\tKey        string
\tRetryAfter time.Duration
}

func (e *LimitedError) Error() string {
\treturn fmt.Sprintf("throttle: %s limited, retry after %s", e.Key, e.RetryAfter)
}
'''

BUCKET_GO = '''\
package throttle

import (
\t"context"
\t"math"
\t"sync"
\t"time"
)

// BucketLimiter is a token bucket: Burst tokens, refilled at Rate per Period.
type BucketLimiter struct {
\topts Options
\tmu   sync.Mutex
\tbkts map[string]*bucket
}

type bucket struct {
\ttokens float64
\tlast   time.Time
}

// NewBucketLimiter returns a token-bucket limiter.
func NewBucketLimiter(opts Options) (*BucketLimiter, error) {
\tif err := opts.normalize(); err != nil {
\t\treturn nil, err
\t}
\treturn &BucketLimiter{opts: opts, bkts: make(map[string]*bucket)}, nil
}

func (b *BucketLimiter) perNanosecond() float64 {
\treturn float64(b.opts.Rate) / float64(b.opts.Period.Nanoseconds())
}

// Allow implements Limiter.
func (b *BucketLimiter) Allow(ctx context.Context, key string) (Decision, error) {
\tif err := ctx.Err(); err != nil {
\t\treturn Decision{}, err
\t}
\tnow := b.opts.Clock.Now()
\tb.mu.Lock()
\tdefer b.mu.Unlock()
\tbk, ok := b.bkts[key]
\tif !ok {
\t\tbk = &bucket{tokens: float64(b.opts.Burst), last: now}
\t\tb.bkts[key] = bk
\t}
\telapsed := now.Sub(bk.last)
\tif elapsed > 0 {
\t\tbk.tokens = math.Min(float64(b.opts.Burst), bk.tokens+float64(elapsed.Nanoseconds())*b.perNanosecond())
\t\tbk.last = now
\t}
\tif bk.tokens >= 1 {
\t\tbk.tokens--
\t\treturn Decision{
\t\t\tAllowed:   true,
\t\t\tRemaining: int64(bk.tokens),
\t\t\tResetAt:   now.Add(b.fullIn(bk.tokens)),
\t\t}, nil
\t}
\twait := time.Duration((1 - bk.tokens) / b.perNanosecond())
\treturn Decision{Allowed: false, RetryAfter: wait, ResetAt: now.Add(b.fullIn(bk.tokens))}, nil
}

func (b *BucketLimiter) fullIn(tokens float64) time.Duration {
\tmissing := float64(b.opts.Burst) - tokens
\tif missing <= 0 {
\t\treturn 0
\t}
\treturn time.Duration(missing / b.perNanosecond())
}

// Close implements Limiter.
func (b *BucketLimiter) Close() error { return nil }

// Len reports how many keys the limiter tracks (for tests and metrics).
func (b *BucketLimiter) Len() int {
\tb.mu.Lock()
\tdefer b.mu.Unlock()
\treturn len(b.bkts)
}
'''

RING_GO = '''\
package window

import "sync"

// Ring keeps per-slot counters for one key; the newest slot is at head.
type Ring struct {
\tmu    sync.Mutex
\tslots []int64
\thead  int
\tstart int64 // unix nanoseconds at which slot head began
\twidth int64 // nanoseconds per slot
}

// NewRing returns a ring of n slots, each width nanoseconds wide.
func NewRing(n int, width int64, now int64) *Ring {
\treturn &Ring{slots: make([]int64, n), width: width, start: now - now%width}
}

// Advance moves head forward so that now falls into the head slot,
// zeroing the slots it passes over.
func (r *Ring) Advance(now int64) {
\tr.mu.Lock()
\tdefer r.mu.Unlock()
\tr.advanceLocked(now)
}

func (r *Ring) advanceLocked(now int64) {
\tsteps := (now - r.start) / r.width
\tif steps <= 0 {
\t\treturn
\t}
\tif steps > int64(len(r.slots)) {
\t\tsteps = int64(len(r.slots))
\t}
\tfor i := int64(0); i < steps; i++ {
\t\tr.head = (r.head + 1) % len(r.slots)
\t\tr.slots[r.head] = 0
\t}
\tr.start += ((now - r.start) / r.width) * r.width
}

// Add counts n events at time now.
func (r *Ring) Add(now int64, n int64) {
\tr.mu.Lock()
\tdefer r.mu.Unlock()
\tr.advanceLocked(now)
\tr.slots[r.head] += n
}

// Sum returns the total over all slots and the fraction of the head slot elapsed.
func (r *Ring) Sum(now int64) (total int64, elapsed float64) {
\tr.mu.Lock()
\tdefer r.mu.Unlock()
\tr.advanceLocked(now)
\tfor _, v := range r.slots {
\t\ttotal += v
\t}
\treturn total, float64(now-r.start) / float64(r.width)
}

// Head returns the head slot's count without advancing.
func (r *Ring) Head() int64 {
\treturn r.slots[r.head]
}
'''

STORE_REDIS_GO = '''\
package throttle

import (
\t"context"
\t"fmt"
\t"os"
\t"strconv"
\t"time"

\t"github.com/redis/go-redis/v9"
)

// RedisStore keeps limiter state in Redis so that replicas share limits.
type RedisStore struct {
\tclient *redis.Client
\tprefix string
\tclock  Clock
}

// RedisOptions configure NewRedisStore.
type RedisOptions struct {
\tURL    string // redis:// URL; defaults to $THROTTLE_REDIS_URL
\tPrefix string // key prefix; see the design notes for the default
\tClock  Clock
}

// NewRedisStore connects to Redis and pings it once.
func NewRedisStore(ctx context.Context, o RedisOptions) (*RedisStore, error) {
\tif o.URL == "" {
\t\to.URL = os.Getenv("THROTTLE_REDIS_URL")
\t}
\tif o.URL == "" {
\t\treturn nil, fmt.Errorf("throttle: no Redis URL (set THROTTLE_REDIS_URL)")
\t}
\topt, err := redis.ParseURL(o.URL)
\tif err != nil {
\t\treturn nil, fmt.Errorf("throttle: parse redis url: %w", err)
\t}
\tif o.Clock == nil {
\t\to.Clock = wallClock{}
\t}
\tc := redis.NewClient(opt)
\tif err := c.Ping(ctx).Err(); err != nil {
\t\t_ = c.Close()
\t\treturn nil, fmt.Errorf("throttle: redis ping: %w", err)
\t}
\treturn &RedisStore{client: c, prefix: o.Prefix, clock: o.Clock}, nil
}

var incrScript = redis.NewScript(`
local n = redis.call("INCRBY", KEYS[1], ARGV[1])
if n == tonumber(ARGV[1]) then
  redis.call("PEXPIRE", KEYS[1], ARGV[2])
end
return n
`)

// Incr adds n to the counter of key in the slot starting at slot, expiring after ttl.
func (s *RedisStore) Incr(ctx context.Context, key string, slot int64, n int64, ttl time.Duration) (int64, error) {
\tk := s.prefix + key + ":" + strconv.FormatInt(slot, 10)
\tv, err := incrScript.Run(ctx, s.client, []string{k}, n, ttl.Milliseconds()).Int64()
\tif err != nil {
\t\treturn 0, fmt.Errorf("throttle: incr %s: %w", k, err)
\t}
\treturn v, nil
}

// Get returns the counter of key in slot (0 when absent).
func (s *RedisStore) Get(ctx context.Context, key string, slot int64) (int64, error) {
\tk := s.prefix + key + ":" + strconv.FormatInt(slot, 10)
\tv, err := s.client.Get(ctx, k).Int64()
\tif err == redis.Nil {
\t\treturn 0, nil
\t}
\treturn v, err
}

// Close closes the connection pool.
func (s *RedisStore) Close() error { return s.client.Close() }
'''

BUCKET_TEST_GO = '''\
package throttle

import (
\t"context"
\t"sync"
\t"testing"
\t"time"
)

type manualClock struct {
\tmu  sync.Mutex
\tnow time.Time
}

func (c *manualClock) Now() time.Time {
\tc.mu.Lock()
\tdefer c.mu.Unlock()
\treturn c.now
}

func (c *manualClock) Advance(d time.Duration) {
\tc.mu.Lock()
\tc.now = c.now.Add(d)
\tc.mu.Unlock()
}

func newClock() *manualClock {
\treturn &manualClock{now: time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)}
}

func TestBucketAllow(t *testing.T) {
\ttests := []struct {
\t\tname    string
\t\trate    int64
\t\tburst   int64
\t\tcalls   int
\t\tadvance time.Duration
\t\twant    []bool
\t}{
\t\t{"within burst", 10, 3, 3, 0, []bool{true, true, true}},
\t\t{"over burst", 10, 2, 3, 0, []bool{true, true, false}},
\t\t{"refills", 10, 1, 2, 100 * time.Millisecond, []bool{true, true}},
\t\t{"partial refill", 10, 1, 2, 50 * time.Millisecond, []bool{true, false}},
\t}
\tfor _, tt := range tests {
\t\tt.Run(tt.name, func(t *testing.T) {
\t\t\tclk := newClock()
\t\t\tl, err := NewBucketLimiter(Options{Rate: tt.rate, Burst: tt.burst, Clock: clk})
\t\t\tif err != nil {
\t\t\t\tt.Fatal(err)
\t\t\t}
\t\t\tfor i := 0; i < tt.calls; i++ {
\t\t\t\td, err := l.Allow(context.Background(), "k")
\t\t\t\tif err != nil {
\t\t\t\t\tt.Fatal(err)
\t\t\t\t}
\t\t\t\tif d.Allowed != tt.want[i] {
\t\t\t\t\tt.Errorf("call %d: allowed = %v, want %v", i, d.Allowed, tt.want[i])
\t\t\t\t}
\t\t\t\tclk.Advance(tt.advance)
\t\t\t}
\t\t})
\t}
}

func TestBucketRetryAfter(t *testing.T) {
\tclk := newClock()
\tl, _ := NewBucketLimiter(Options{Rate: 4, Burst: 1, Clock: clk})
\tctx := context.Background()
\tif d, _ := l.Allow(ctx, "k"); !d.Allowed {
\t\tt.Fatal("first call must pass")
\t}
\td, _ := l.Allow(ctx, "k")
\tif d.Allowed || d.RetryAfter != 250*time.Millisecond {
\t\tt.Fatalf("got %+v, want rejected with RetryAfter 250ms", d)
\t}
}

func TestBucketKeysAreIndependent(t *testing.T) {
\tl, _ := NewBucketLimiter(Options{Rate: 1, Burst: 1, Clock: newClock()})
\tctx := context.Background()
\tfor _, k := range []string{"a", "b", "c"} {
\t\tif d, _ := l.Allow(ctx, k); !d.Allowed {
\t\t\tt.Errorf("key %s: first call rejected", k)
\t\t}
\t}
\tif n := l.Len(); n != 3 {
\t\tt.Errorf("Len = %d, want 3", n)
\t}
}

func BenchmarkBucketAllow(b *testing.B) {
\tl, _ := NewBucketLimiter(Options{Rate: 1 << 30})
\tctx := context.Background()
\tb.ReportAllocs()
\tb.RunParallel(func(pb *testing.PB) {
\t\tfor pb.Next() {
\t\t\t_, _ = l.Allow(ctx, "bench")
\t\t}
\t})
}
'''

WINDOW_GO_V1 = '''\
package throttle

import (
\t"context"
\t"hash/maphash"
\t"sync"
\t"time"
)

// DefaultShards is the number of key shards of a SlidingLimiter.
const DefaultShards = 16

// WindowLimiter approximates a sliding window from the current and the
// previous fixed window: count = prev*(1-elapsed) + cur.
type WindowLimiter struct {
\topts   Options
\tseed   maphash.Seed
\tshards [DefaultShards]shard
}

type shard struct {
\tmu      sync.Mutex
\twindows map[string]*window
}

type window struct {
\tmu        sync.Mutex
\tstart     time.Time
\tprevCount int64
\tcurCount  int64
}

// NewWindowLimiter returns a sliding-window limiter.
func NewWindowLimiter(opts Options) (*WindowLimiter, error) {
\tif err := opts.normalize(); err != nil {
\t\treturn nil, err
\t}
\tl := &WindowLimiter{opts: opts, seed: maphash.MakeSeed()}
\tfor i := range l.shards {
\t\tl.shards[i].windows = make(map[string]*window)
\t}
\treturn l, nil
}

func (l *WindowLimiter) shardFor(key string) *shard {
\th := maphash.String(l.seed, key)
\treturn &l.shards[h%DefaultShards]
}

func (l *WindowLimiter) get(key string, now time.Time) *window {
\ts := l.shardFor(key)
\ts.mu.Lock()
\tdefer s.mu.Unlock()
\tw, ok := s.windows[key]
\tif !ok {
\t\tw = &window{start: now.Truncate(l.opts.Period)}
\t\ts.windows[key] = w
\t}
\treturn w
}

// rotate moves w forward so that now falls in its current window.
func (w *window) rotate(now time.Time, period time.Duration) float64 {
\tw.mu.Lock()
\tpassed := now.Sub(w.start) / period
\tif passed >= 2 {
\t\tw.prevCount, w.curCount = 0, 0
\t\tw.start = now.Truncate(period)
\t} else if passed == 1 {
\t\tw.prevCount, w.curCount = w.curCount, 0
\t\tw.start = w.start.Add(period)
\t}
\tw.mu.Unlock()
\telapsed := float64(now.Sub(w.start)) / float64(period)
\treturn float64(w.prevCount) * (1 - elapsed)
}

// Allow implements Limiter.
func (l *WindowLimiter) Allow(ctx context.Context, key string) (Decision, error) {
\tif err := ctx.Err(); err != nil {
\t\treturn Decision{}, err
\t}
\tnow := l.opts.Clock.Now()
\tw := l.get(key, now)
\tweighted := w.rotate(now, l.opts.Period)
\tw.mu.Lock()
\tdefer w.mu.Unlock()
\tcount := weighted + float64(w.curCount)
\tif count+1 > float64(l.opts.Rate) {
\t\treset := w.start.Add(l.opts.Period)
\t\treturn Decision{Allowed: false, RetryAfter: reset.Sub(now), ResetAt: reset}, nil
\t}
\tw.curCount++
\treturn Decision{
\t\tAllowed:   true,
\t\tRemaining: l.opts.Rate - int64(count) - 1,
\t\tResetAt:   w.start.Add(2 * l.opts.Period),
\t}, nil
}

// Close implements Limiter.
func (l *WindowLimiter) Close() error { return nil }
'''

WINDOW_TEST_GO = '''\
package throttle

import (
\t"context"
\t"sync"
\t"testing"
\t"time"
)

func TestSlidingWindowAllow(t *testing.T) {
\ttests := []struct {
\t\tname  string
\t\trate  int64
\t\tsteps []step
\t}{
\t\t{"under rate", 3, []step{{0, true}, {0, true}, {0, true}}},
\t\t{"over rate", 2, []step{{0, true}, {0, true}, {0, false}}},
\t\t{"next window half weight", 2, []step{{0, true}, {0, true}, {1500 * time.Millisecond, true}, {0, false}}},
\t\t{"two windows later", 1, []step{{0, true}, {2 * time.Second, true}}},
\t}
\tfor _, tt := range tests {
\t\tt.Run(tt.name, func(t *testing.T) {
\t\t\tclk := newClock()
\t\t\tl, err := NewWindowLimiter(Options{Rate: tt.rate, Clock: clk})
\t\t\tif err != nil {
\t\t\t\tt.Fatal(err)
\t\t\t}
\t\t\tfor i, s := range tt.steps {
\t\t\t\tclk.Advance(s.advance)
\t\t\t\td, _ := l.Allow(context.Background(), "k")
\t\t\t\tif d.Allowed != s.want {
\t\t\t\t\tt.Errorf("step %d: allowed = %v, want %v", i, d.Allowed, s.want)
\t\t\t\t}
\t\t\t}
\t\t})
\t}
}

type step struct {
\tadvance time.Duration
\twant    bool
}

func TestSlidingWindowRollover(t *testing.T) {
\tclk := newClock()
\tl, _ := NewWindowLimiter(Options{Rate: 100, Clock: clk})
\tctx := context.Background()
\tvar wg sync.WaitGroup
\tallowed := make(chan bool, 400)
\tfor g := 0; g < 4; g++ {
\t\twg.Add(1)
\t\tgo func() {
\t\t\tdefer wg.Done()
\t\t\tfor i := 0; i < 100; i++ {
\t\t\t\tif i == 50 {
\t\t\t\t\tclk.Advance(10 * time.Millisecond)
\t\t\t\t}
\t\t\t\td, _ := l.Allow(ctx, "k")
\t\t\t\tallowed <- d.Allowed
\t\t\t}
\t\t}()
\t}
\twg.Wait()
\tclose(allowed)
\tn := 0
\tfor a := range allowed {
\t\tif a {
\t\t\tn++
\t\t}
\t}
\tif n > 100 {
\t\tt.Fatalf("allowed %d in one window of rate 100", n)
\t}
}
'''

GOLANGCI_V1 = '''\
run:
  timeout: 3m
  tests: true
linters:
  disable-all: true
  enable:
    - errcheck
    - govet
    - staticcheck
    - unused
    - gofumpt
    - lll
    - misspell
    - revive
linters-settings:
  lll:
    line-length: 120
    tab-width: 4
  revive:
    rules:
      - name: exported
      - name: var-naming
  misspell:
    locale: US
issues:
  exclude-rules:
    - path: _test\\.go
      linters: [lll]
'''

DESIGN_DOC = '''\
# throttle v2 — sliding windows (design notes, agreed 2024-04-22)

## Why
Token buckets let a client spend its whole burst at the start of every second. Two of our
consumers (the public search API and the webhook fan-out) want "at most N in any rolling
second", which a bucket cannot express. v2 adds a sliding-window limiter next to the bucket;
both implement the same `Limiter` interface so callers can switch by configuration.

## Algorithm
We use the two-window approximation (as in Cloudflare's write-up): keep the count of the
current fixed window and of the previous one, and estimate the rolling count as

    estimate = previous * (1 - elapsed_fraction) + current

where `elapsed_fraction` is how far we are into the current window. It needs two integers per
key instead of a log of timestamps, and its worst-case overshoot is small for smooth traffic.

## Layout
- Keys are hashed (`hash/maphash`) onto a fixed array of shards to keep lock contention low:
  `DefaultShards = 16`. Each shard has its own mutex and map; each key's window has its own
  mutex for the counters. Never hold a shard lock while taking a window lock for long.
- Shared limits go through the `Store` interface. The Redis store writes one counter per key
  and window, named `<prefix><key>:<window start in ms>`, with the prefix `thr:v2:` so v1 and
  v2 keys never collide during the rollout. Counters expire after two periods.
- The in-memory store evicts keys idle for more than 10 periods (sweep every minute).

## API
- Constructors follow the existing naming (`NewBucketLimiter`), one per algorithm.
- `Decision` gains nothing; `RetryAfter` for a window is the time until the estimate drops
  below the rate, rounded up to a millisecond.
- Middleware and HTTP helpers keep working with any `Limiter`.

## Compatibility
- Minimum Go version stays what CI builds with; we do not raise `go.mod` for this feature.
- No new dependencies except what the Redis store already uses (`go-redis/v9`).

## Rollout
1. Land the in-memory limiter behind the interface, with tests and benchmarks.
2. Land the Redis store changes (prefix above) and the integration tests (docker compose).
3. Switch the search API first, webhooks a week later.

## Open questions
- Should `AllowN` exist for batch callers? (webhooks send up to 50 events per call)
- Do we expose the estimate for metrics?
'''


def go_test_v(rng: random.Random, tests: list[tuple[str, bool]], pkg: str = "github.com/"
              "orbitlabs/throttle", extra_fail: str = "") -> str:
    """`go test -v` output for ``tests`` (name, passes)."""
    lines = []
    failed = False
    for name, ok in tests:
        dur = rng.uniform(0, 0.02) if ok else rng.uniform(0.01, 0.3)
        lines.append(f"=== RUN   {name}")
        if not ok:
            lines.append(extra_fail or f"    {name.split('/')[-1].lower()}_test.go:{rng.randrange(20, 90)}: "
                         f"unexpected result")
            failed = True
        lines.append(f"--- {'PASS' if ok else 'FAIL'}: {name} ({dur:.2f}s)")
    total = rng.uniform(0.2, 1.8)
    if failed:
        lines += ["FAIL", f"FAIL\t{pkg}\t{total:.3f}s", "FAIL"]
    else:
        lines += ["PASS", f"ok  \t{pkg}\t{total:.3f}s"]
    return "\n".join(lines)


def ci_log(rng: random.Random, run_id: int, ok: bool) -> str:
    """A GitHub Actions job log (trimmed by the tool to the interesting steps)."""
    t = 0.0

    def stamp() -> str:
        nonlocal t
        t += rng.uniform(0.05, 4.0)
        return f"2024-05-0{rng.randrange(2, 4)}T1{rng.randrange(0, 10)}:{int(t // 60):02d}:" \
               f"{t % 60:06.3f}Z"

    out = [f"{stamp()} ##[group]Run actions/checkout@v4", f"{stamp()} Syncing repository: "
           "orbitlabs/throttle", f"{stamp()} ##[endgroup]", f"{stamp()} ##[group]Run go mod "
           "download", f"{stamp()} go: downloading github.com/redis/go-redis/v9 v9.5.1",
           f"{stamp()} go: downloading github.com/cespare/xxhash/v2 v2.2.0",
           f"{stamp()} go: downloading github.com/dgryski/go-rendezvous v0.0.0-20200823014737-"
           "9f7001d12a5f", f"{stamp()} ##[endgroup]", f"{stamp()} ##[group]Run go vet ./...",
           f"{stamp()} ##[endgroup]", f"{stamp()} ##[group]Run go test -race -count=1 ./..."]
    for pkg, secs in (("github.com/orbitlabs/throttle", 2.1), ("github.com/orbitlabs/throttle/"
                      "internal/window", 1.2), ("github.com/orbitlabs/throttle/httpx", 0.6)):
        out.append(f"{stamp()} ok  \t{pkg}\t{secs + rng.uniform(0, 1):.3f}s")
    if not ok:
        out += [f"{stamp()} --- FAIL: TestRedisStoreIntegration (5.02s)",
                f"{stamp()}     store_redis_integration_test.go:41: dial tcp 127.0.0.1:6379: "
                "connect: connection refused", f"{stamp()} FAIL", f"{stamp()} FAIL\tgithub.com/"
                "orbitlabs/throttle/integration\t5.044s",
                f"{stamp()} ##[error]Process completed with exit code 1."]
    else:
        out += [f"{stamp()} ok  \tgithub.com/orbitlabs/throttle/integration\t"
                f"{rng.uniform(3, 6):.3f}s", f"{stamp()} ##[endgroup]",
                f"{stamp()} Cleaning up orphan processes"]
    return f"run {run_id} / job test (ubuntu-latest)\n" + "\n".join(out)

MIDDLEWARE_GO = '''\
// Package httpx adapts throttle limiters to net/http.
package httpx

import (
\t"context"
\t"errors"
\t"math"
\t"net/http"
\t"strconv"
\t"time"

\t"github.com/orbitlabs/throttle"
)

// KeyFromRequest picks the limiter key of a request; ok=false skips limiting.
type KeyFromRequest func(r *http.Request) (key string, ok bool)

// ByHeader keys requests by the value of header h (skipped when absent).
func ByHeader(h string) KeyFromRequest {
\treturn func(r *http.Request) (string, bool) {
\t\tv := r.Header.Get(h)
\t\treturn v, v != ""
\t}
}

// ByRemoteIP keys requests by the client address without the port.
func ByRemoteIP() KeyFromRequest {
\treturn func(r *http.Request) (string, bool) {
\t\thost := r.RemoteAddr
\t\tfor i := len(host) - 1; i >= 0; i-- {
\t\t\tif host[i] == ':' {
\t\t\t\thost = host[:i]
\t\t\t\tbreak
\t\t\t}
\t\t}
\t\treturn host, host != ""
\t}
}

// Options configure Handler.
type Options struct {
\tKey       KeyFromRequest
\tOnLimited http.Handler                               // defaults to a plain 429
\tOnFailure func(w http.ResponseWriter, r *http.Request, err error) // defaults to fail-open
\tTimeout   time.Duration                              // for the limiter call; default 50ms
}

// Handler wraps next so that requests over the limit get 429 with Retry-After.
func Handler(l throttle.Limiter, o Options, next http.Handler) http.Handler {
\tif o.Timeout <= 0 {
\t\to.Timeout = 50 * time.Millisecond
\t}
\treturn http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
\t\tkey, ok := o.Key(r)
\t\tif !ok {
\t\t\tnext.ServeHTTP(w, r)
\t\t\treturn
\t\t}
\t\tctx, cancel := context.WithTimeout(r.Context(), o.Timeout)
\t\tdefer cancel()
\t\td, err := l.Allow(ctx, key)
\t\tif err != nil {
\t\t\tif o.OnFailure != nil {
\t\t\t\to.OnFailure(w, r, err)
\t\t\t\treturn
\t\t\t}
\t\t\tnext.ServeHTTP(w, r) // fail open: a limiter outage must not take the API down
\t\t\treturn
\t\t}
\t\tw.Header().Set("RateLimit-Remaining", strconv.FormatInt(d.Remaining, 10))
\t\tif !d.Allowed {
\t\t\tsecs := int(math.Ceil(d.RetryAfter.Seconds()))
\t\t\tw.Header().Set("Retry-After", strconv.Itoa(secs))
\t\t\tif o.OnLimited != nil {
\t\t\t\to.OnLimited.ServeHTTP(w, r)
\t\t\t\treturn
\t\t\t}
\t\t\thttp.Error(w, http.StatusText(http.StatusTooManyRequests), http.StatusTooManyRequests)
\t\t\treturn
\t\t}
\t\tnext.ServeHTTP(w, r)
\t})
}

// IsLimited reports whether err (or one it wraps) is a *throttle.LimitedError.
func IsLimited(err error) bool {
\tvar le *throttle.LimitedError
\treturn errors.As(err, &le)
}
'''

MIDDLEWARE_TEST_GO = '''\
package httpx

import (
\t"context"
\t"errors"
\t"net/http"
\t"net/http/httptest"
\t"testing"
\t"time"

\t"github.com/orbitlabs/throttle"
)

type fixedLimiter struct {
\td   throttle.Decision
\terr error
}

func (f fixedLimiter) Allow(context.Context, string) (throttle.Decision, error) { return f.d, f.err }
func (f fixedLimiter) Close() error                                           { return nil }

func TestHandler(t *testing.T) {
\tok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) })
\ttests := []struct {
\t\tname       string
\t\tlimiter    throttle.Limiter
\t\theader     string
\t\twantStatus int
\t\twantRetry  string
\t}{
\t\t{"allowed", fixedLimiter{d: throttle.Decision{Allowed: true, Remaining: 4}}, "u1", 204, ""},
\t\t{"limited", fixedLimiter{d: throttle.Decision{RetryAfter: 1500 * time.Millisecond}}, "u1", 429, "2"},
\t\t{"no key skips", fixedLimiter{d: throttle.Decision{}}, "", 204, ""},
\t\t{"limiter down fails open", fixedLimiter{err: errors.New("redis: connection refused")}, "u1", 204, ""},
\t}
\tfor _, tt := range tests {
\t\tt.Run(tt.name, func(t *testing.T) {
\t\t\th := Handler(tt.limiter, Options{Key: ByHeader("X-User")}, ok)
\t\t\treq := httptest.NewRequest("GET", "/v1/search?q=x", nil)
\t\t\tif tt.header != "" {
\t\t\t\treq.Header.Set("X-User", tt.header)
\t\t\t}
\t\t\trec := httptest.NewRecorder()
\t\t\th.ServeHTTP(rec, req)
\t\t\tif rec.Code != tt.wantStatus {
\t\t\t\tt.Errorf("status = %d, want %d", rec.Code, tt.wantStatus)
\t\t\t}
\t\t\tif got := rec.Header().Get("Retry-After"); got != tt.wantRetry {
\t\t\t\tt.Errorf("Retry-After = %q, want %q", got, tt.wantRetry)
\t\t\t}
\t\t})
\t}
}

func TestByRemoteIP(t *testing.T) {
\tfor addr, want := range map[string]string{
\t\t"10.1.2.3:5555":     "10.1.2.3",
\t\t"[2001:db8::1]:443": "[2001:db8::1]",
\t\t"":                  "",
\t} {
\t\treq := httptest.NewRequest("GET", "/", nil)
\t\treq.RemoteAddr = addr
\t\tgot, _ := ByRemoteIP()(req)
\t\tif got != want {
\t\t\tt.Errorf("ByRemoteIP(%q) = %q, want %q", addr, got, want)
\t\t}
\t}
}
'''

CHANGELOG_MD = '''\
# Changelog

All notable changes to this project are documented here. The format follows
Keep a Changelog, and the project uses semantic versioning.

## Unreleased

## 1.4.0 — 2024-04-02

### Added
- `httpx.ByRemoteIP` key function.
- `RateLimit-Remaining` response header from `httpx.Handler`.

### Changed
- `Retry-After` is sent in whole seconds, rounded up (was milliseconds in a custom header).
- The memory store evicts keys idle for more than ten periods.

## 1.3.1 — 2024-03-11

### Fixed
- Token bucket lost precision after long idle periods (float drift).
- `RetryAfter` could be zero for a rejected call at the exact refill boundary.

## 1.3.0 — 2024-02-19

### Added
- Redis store (`NewRedisStore`) so replicas share one limit.
- Integration tests behind the `integration` build tag, with a compose file.

### Changed
- `Options.normalize` fills defaults; constructors no longer panic on a zero Period.

## 1.2.0 — 2023-12-04

### Added
- `Middleware` for plain functions, `LimitedError` with `RetryAfter`.
- `httpx.Handler` for net/http.

## 1.1.0 — 2023-10-30

### Added
- Pluggable `Clock` for tests.

## 1.0.0 — 2023-09-12

- First stable release: token bucket, memory store.
'''

STORE_MEMORY_GO = '''\
package throttle

import (
\t"context"
\t"strconv"
\t"sync"
\t"time"
)

// memoryStore keeps counters in process memory. Idle keys are evicted by a
// sweep that runs at most once a minute, piggybacked on Incr.
type memoryStore struct {
\tmu        sync.Mutex
\tclock     Clock
\tvals      map[string]memVal
\tlastSweep time.Time
}

type memVal struct {
\tn       int64
\texpires time.Time
}

func newMemoryStore(c Clock) *memoryStore {
\treturn &memoryStore{clock: c, vals: make(map[string]memVal)}
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

func (m *memoryStore) Incr(_ context.Context, key string, slot int64, n int64, ttl time.Duration) (int64, error) {
\tm.mu.Lock()
\tdefer m.mu.Unlock()
\tnow := m.clock.Now()
\tm.maybeSweep(now)
\tk := key + ":" + itoa(slot)
\tv := m.vals[k]
\tif now.After(v.expires) {
\t\tv = memVal{}
\t}
\tv.n += n
\tv.expires = now.Add(ttl)
\tm.vals[k] = v
\treturn v.n, nil
}

func (m *memoryStore) Get(_ context.Context, key string, slot int64) (int64, error) {
\tm.mu.Lock()
\tdefer m.mu.Unlock()
\tv, ok := m.vals[key+":"+itoa(slot)]
\tif !ok || m.clock.Now().After(v.expires) {
\t\treturn 0, nil
\t}
\treturn v.n, nil
}

func (m *memoryStore) maybeSweep(now time.Time) {
\tif now.Sub(m.lastSweep) < time.Minute {
\t\treturn
\t}
\tm.lastSweep = now
\tfor k, v := range m.vals {
\t\tif now.After(v.expires) {
\t\t\tdelete(m.vals, k)
\t\t}
\t}
}

func (m *memoryStore) Close() error {
\tm.mu.Lock()
\tdefer m.mu.Unlock()
\tm.vals = nil
\treturn nil
}

// Len reports the number of live counters (tests only).
func (m *memoryStore) Len() int {
\tm.mu.Lock()
\tdefer m.mu.Unlock()
\treturn len(m.vals)
}
'''


def cover_func(rng: random.Random) -> str:
    """`go tool cover -func` output."""
    funcs = [("limiter.go", n) for n in ("normalize", "Now", "Middleware", "Error")] + \
        [("bucket.go", n) for n in ("NewBucketLimiter", "perNanosecond", "Allow", "fullIn", "Close",
                                    "Len")] + \
        [("window.go", n) for n in ("NewSlidingLimiter", "shardFor", "get", "rotate", "Allow",
                                    "AllowN", "Close")] + \
        [("store_memory.go", n) for n in ("newMemoryStore", "itoa", "Incr", "Get", "maybeSweep",
                                          "Close", "Len")] + \
        [("store_redis.go", n) for n in ("NewRedisStore", "Incr", "Get", "Close")] + \
        [("httpx/middleware.go", n) for n in ("ByHeader", "ByRemoteIP", "Handler", "IsLimited")] + \
        [("internal/window/ring.go", n) for n in ("NewRing", "Advance", "advanceLocked", "Add",
                                                   "Sum", "Head")]
    lines = []
    line = 10
    total = []
    for f, n in funcs:
        line += rng.randrange(6, 30)
        pct = 0.0 if f == "store_redis.go" else rng.choice([100.0, 100.0, 100.0, 92.3, 87.5,
                                                             83.3, 75.0, 66.7])
        total.append(pct)
        lines.append(f"github.com/orbitlabs/throttle/{f}:{line}:\t{n:<20}\t{pct:.1f}%")
    lines.append(f"total:\t\t\t\t\t\t(statements)\t{sum(total) / len(total):.1f}%")
    return "\n".join(lines)


def pprof_top(rng: random.Random) -> str:
    rows = [("runtime.lock2", 0.0), ("sync.(*Mutex).Lock", 0.0), ("hash/maphash.String", 0.0),
            ("github.com/orbitlabs/throttle.(*SlidingLimiter).Allow", 0.0),
            ("github.com/orbitlabs/throttle.(*window).rotate", 0.0),
            ("time.Time.Sub", 0.0), ("time.Time.Truncate", 0.0), ("runtime.procyield", 0.0),
            ("github.com/orbitlabs/throttle.(*SlidingLimiter).get", 0.0),
            ("sync.(*Mutex).Unlock", 0.0), ("runtime.memhash", 0.0), ("time.Now", 0.0),
            ("runtime.nanotime1", 0.0), ("github.com/orbitlabs/throttle.wallClock.Now", 0.0),
            ("testing.(*B).RunParallel.func1", 0.0), ("runtime.futex", 0.0)]
    flat = sorted((rng.uniform(0.02, 0.9) for _ in rows), reverse=True)
    total = sum(flat)
    out = ["File: throttle.test", "Type: cpu", "Time: May 3, 2024 at 14:20pm (CEST)",
           f"Duration: 3.61s, Total samples = {total:.2f}s ({total / 3.61 * 100:.2f}%)",
           f"Showing nodes accounting for {total:.2f}s, 100% of {total:.2f}s total",
           "      flat  flat%   sum%        cum   cum%"]
    acc = 0.0
    for (name, _), f in zip(rows, flat, strict=True):
        acc += f
        cum = f + rng.uniform(0, 0.6)
        out.append(f"{f:9.2f}s {f / total * 100:5.2f}% {acc / total * 100:6.2f}% {cum:9.2f}s "
                   f"{cum / total * 100:5.2f}%  {name}")
    return "\n".join(out)

RING_TEST_GO = '''\
package window

import (
\t"sync"
\t"testing"
)

const ms = int64(1_000_000)

func TestRingAdvance(t *testing.T) {
\ttests := []struct {
\t\tname     string
\t\tslots    int
\t\tadds     []int64 // times (ns) at which one event is added
\t\tat       int64   // time of the Sum
\t\twantSum  int64
\t\twantHead int
\t}{
\t\t{"same slot", 4, []int64{0, 10 * ms, 20 * ms}, 30 * ms, 3, 0},
\t\t{"next slot", 4, []int64{0, 120 * ms}, 130 * ms, 2, 1},
\t\t{"wraps", 4, []int64{0, 100 * ms, 200 * ms, 300 * ms, 400 * ms}, 450 * ms, 4, 0},
\t\t{"gap longer than ring", 4, []int64{0, 10 * ms, 900 * ms}, 950 * ms, 1, 1},
\t}
\tfor _, tt := range tests {
\t\tt.Run(tt.name, func(t *testing.T) {
\t\t\tr := NewRing(tt.slots, 100*ms, 0)
\t\t\tfor _, at := range tt.adds {
\t\t\t\tr.Add(at, 1)
\t\t\t}
\t\t\tsum, _ := r.Sum(tt.at)
\t\t\tif sum != tt.wantSum {
\t\t\t\tt.Errorf("Sum = %d, want %d", sum, tt.wantSum)
\t\t\t}
\t\t\tif r.head != tt.wantHead {
\t\t\t\tt.Errorf("head = %d, want %d", r.head, tt.wantHead)
\t\t\t}
\t\t})
\t}
}

func TestRingSum(t *testing.T) {
\tr := NewRing(10, 100*ms, 0)
\tfor i := int64(0); i < 10; i++ {
\t\tr.Add(i*100*ms, i)
\t}
\tsum, elapsed := r.Sum(950 * ms)
\tif sum != 45 {
\t\tt.Errorf("Sum = %d, want 45", sum)
\t}
\tif elapsed < 0.49 || elapsed > 0.51 {
\t\tt.Errorf("elapsed = %v, want 0.5", elapsed)
\t}
}

func TestRingConcurrent(t *testing.T) {
\tr := NewRing(8, 10*ms, 0)
\tvar wg sync.WaitGroup
\tfor g := 0; g < 4; g++ {
\t\twg.Add(2)
\t\tgo func(g int) {
\t\t\tdefer wg.Done()
\t\t\tfor i := 0; i < 1000; i++ {
\t\t\t\tr.Add(int64(i)*ms, 1)
\t\t\t}
\t\t}(g)
\t\tgo func() {
\t\t\tdefer wg.Done()
\t\t\tfor i := 0; i < 1000; i++ {
\t\t\t\t_ = r.Head()
\t\t\t}
\t\t}()
\t}
\twg.Wait()
\tif sum, _ := r.Sum(2000 * ms); sum < 0 {
\t\tt.Fatal("negative sum")
\t}
}

func BenchmarkRingAdd(b *testing.B) {
\tr := NewRing(60, 1000*ms, 0)
\tfor i := 0; i < b.N; i++ {
\t\tr.Add(int64(i)*ms, 1)
\t}
}
'''
