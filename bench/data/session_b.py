"""Session B: a coding agent adds a sliding-window limiter to a Go library.

Another shape than session A: fewer, heavier cycles (2-4 tool calls per turn), long file reads,
test and race-detector logs, diffs, CI logs, a design document pasted by the user (a
``context`` entry), and "no, I meant ..." corrections. ~40k tokens, 14 planted facts.
"""

from __future__ import annotations

from bench.data.common import Builder, Fact, FixtureSession
from bench.data.repo_b import (
    BUCKET_GO,
    BUCKET_TEST_GO,
    CHANGELOG_MD,
    DESIGN_DOC,
    GOLANGCI_V1,
    LIMITER_GO,
    MIDDLEWARE_GO,
    MIDDLEWARE_TEST_GO,
    RING_GO,
    RING_TEST_GO,
    STORE_MEMORY_GO,
    STORE_REDIS_GO,
    WINDOW_GO_V1,
    WINDOW_TEST_GO,
    ci_log,
    cover_func,
    go_test_v,
    pprof_top,
)

SYSTEM = (
    "You are a coding agent working in the user's checkout of github.com/orbitlabs/throttle "
    "(Go). Tools: `read_file(path, start?, end?)`, `run(cmd)` in the repository root, "
    "`apply_patch(patch)` with unified diffs, and `grep(pattern, path?)`. Read before you "
    "edit, keep diffs minimal, run the tests after every change, and never push: the user "
    "opens pull requests."
)

FACTS = [
    Fact("branch", "feat/sliding-window-v2", "the branch to work on", "user"),
    Fact("shards", "DefaultShards = 16", "the number of key shards (design)", "context"),
    Fact("redis_prefix", "thr:v2:", "the Redis key prefix for v2 (design)", "context"),
    Fact("go_image", "golang:1.21.9-bookworm", "the Go toolchain CI builds with", "user",
         stale=("Go 1.22",)),
    Fact("overshoot", "allowed 103 in one window", "what the failing rollover test reported",
         "tool"),
    Fact("race_site", "ring.go:88", "where the race detector pointed", "tool"),
    Fact("diagnosis", "w.prevCount after releasing w.mu", "the cause of the race", "assistant"),
    Fact("constructor", "NewSlidingLimiter", "the constructor's name", "user",
         stale=("NewWindowLimiter",)),
    Fact("reviewer", "Ines Carvalho", "who reviews the PR", "user"),
    Fact("bench", "118.4 ns/op", "the sliding limiter's benchmark", "tool"),
    Fact("redis_env", "THROTTLE_REDIS_URL", "the variable the Redis store reads", "tool"),
    Fact("allow_n", "AllowN(ctx, key, n)", "the batch method's signature", "assistant"),
    Fact("ticket", "THR-318", "the ticket the PR references", "user"),
    Fact("line_length", "line-length: 140", "the linter's line limit", "tool",
         stale=("line-length: 120",)),
]


def numbered(text: str, start: int = 1, end: int | None = None) -> str:
    lines = text.splitlines()
    end = end or len(lines)
    return "\n".join(f"{i:>4}\t{line}" for i, line in enumerate(lines[start - 1:end], start))


def diff(path: str, old: str, new: str, context: int = 3) -> str:
    import difflib

    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True),
                                        f"a/{path}", f"b/{path}", n=context))


def build() -> FixtureSession:
    b = Builder("quality-b", seed=424242, system=SYSTEM)
    rng = b.rng
    window_v1 = WINDOW_GO_V1
    window_v2 = window_v1.replace(
        "\tw.mu.Lock()\n\tpassed := now.Sub(w.start) / period",
        "\tpassed := now.Sub(w.start) / period").replace(
        "\t\tw.start = w.start.Add(period)\n\t}\n\tw.mu.Unlock()\n\telapsed",
        "\t\tw.start = w.start.Add(period)\n\t}\n\telapsed").replace(
        "\tweighted := w.rotate(now, l.opts.Period)\n\tw.mu.Lock()\n\tdefer w.mu.Unlock()\n",
        "\tw.mu.Lock()\n\tdefer w.mu.Unlock()\n\tweighted := w.rotate(now, l.opts.Period)\n").replace(
        "// rotate moves w forward so that now falls in its current window.",
        "// rotate moves w forward so that now falls in its current window.\n"
        "// The caller holds w.mu.")
    window_v3 = window_v2.replace("WindowLimiter", "SlidingLimiter").replace(
        "// SlidingLimiter approximates", "// WindowLimiter approximates")
    test_v1 = WINDOW_TEST_GO
    test_v2 = test_v1.replace("NewWindowLimiter", "NewSlidingLimiter")

    # 1 -- branch (user)
    b.user("Hey. We're adding a sliding-window limiter to throttle today. Work on "
           "feat/sliding-window-v2 — I already created it from main. Have a look around first.")
    b.tools(("run", {"cmd": "git status -sb && git log --oneline -8"},
             "## feat/sliding-window-v2\n" + "\n".join(
                 f"{h} {m}" for h, m in [
                     ("4be1d07", "httpx: pass Retry-After through as seconds"),
                     ("a90c3e2", "bucket: avoid float drift on long idle periods"),
                     ("17f2d5b", "store: memory store evicts idle keys"),
                     ("c3e88a0", "ci: cache the module download"),
                     ("0d4e6b1", "docs: middleware example"),
                     ("e7f19c4", "bucket: RetryAfter rounds up to the next ms"),
                     ("98aa210", "limiter: Options.normalize fills defaults"),
                     ("5b2c7de", "initial import")])),
            ("run", {"cmd": "tree -I testdata --noreport"},
             ".\n├── .github\n│   └── workflows\n│       └── ci.yml\n├── .golangci.yml\n├── "
             "CHANGELOG.md\n├── LICENSE\n├── README.md\n├── bucket.go\n├── bucket_test.go\n├── "
             "doc.go\n├── go.mod\n├── go.sum\n├── httpx\n│   ├── middleware.go\n│   └── "
             "middleware_test.go\n├── integration\n│   ├── docker-compose.yml\n│   └── "
             "store_redis_integration_test.go\n├── internal\n│   └── window\n│       ├── "
             "ring.go\n│       └── ring_test.go\n├── limiter.go\n├── store.go\n├── "
             "store_memory.go\n└── store_redis.go"),
            ("read_file", {"path": "limiter.go"}, numbered(LIMITER_GO)),
            preface="Let me get oriented: branch state, layout and the app interface.")
    b.answer("You're on the branch, clean, 8 commits (the newest is the Retry-After change in "
             "httpx). The library is small: `limiter.go` defines `Limiter` (Allow + Close), "
             "`Decision` and `Options` with defaults from `normalize()`; `bucket.go` is the only "
             "algorithm so far; there are memory and Redis stores, an `httpx` middleware, and "
             "`internal/window` already has a `Ring` of per-slot counters we may reuse.")

    # 2 -- the pasted design document (context)
    b.user("Here's the design we agreed on last week, read it before writing anything:")
    b.context(DESIGN_DOC)
    b.tools(("read_file", {"path": "bucket.go"}, numbered(BUCKET_GO)),
            ("read_file", {"path": "store.go"},
             numbered("package throttle\n\nimport (\n\t\"context\"\n\t\"time\"\n)\n\n// Store "
                      "keeps counters for limiters that share state.\ntype Store interface {\n"
                      "\t// Incr adds n to the counter of key in slot and returns the new value."
                      "\n\tIncr(ctx context.Context, key string, slot int64, n int64, ttl "
                      "time.Duration) (int64, error)\n\t// Get returns the counter of key in "
                      "slot, 0 when absent.\n\tGet(ctx context.Context, key string, slot int64)"
                      " (int64, error)\n\tClose() error\n}\n")),
            preface="Read it. Now the existing algorithm and the Store interface, to match them.")
    b.answer("Got it. Summary of what I'll follow: two-window approximation (previous × (1 − "
             "elapsed) + current), keys hashed onto a fixed shard array with a mutex per shard "
             "and per window, the Redis prefix for v2 keys, constructors named like the bucket's, "
             "no `go.mod` bump. The bucket keeps one mutex for the whole map; the window limiter "
             "will shard instead. The Store interface (Incr/Get per slot) fits the window "
             "counters as is.")

    # 3 -- Go version, first value (user) -> superseded in 4
    b.user("Also, feel free to use Go 1.22 features, range-over-int and so on, makes the loops "
           "nicer.")
    b.tools(("read_file", {"path": "go.mod"},
             "module github.com/orbitlabs/throttle\n\ngo 1.21\n\nrequire github.com/redis/"
             "go-redis/v9 v9.5.1\n\nrequire (\n\tgithub.com/cespare/xxhash/v2 v2.2.0 // indirect"
             "\n\tgithub.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // "
             "indirect\n)\n"),
            ("read_file", {"path": ".github/workflows/ci.yml"},
             "name: ci\non:\n  push:\n    branches: [main]\n  pull_request:\njobs:\n  test:\n"
             "    runs-on: ubuntu-latest\n    container: ${{ vars.GO_IMAGE }}\n    services:\n"
             "      redis:\n        image: redis:7-alpine\n        ports: [\"6379:6379\"]\n"
             "    steps:\n      - uses: actions/checkout@v4\n      - run: go mod download\n"
             "      - run: go vet ./...\n      - run: go test -race -count=1 ./...\n"
             "        env:\n          THROTTLE_REDIS_URL: redis://redis:6379/0\n  lint:\n"
             "    runs-on: ubuntu-latest\n    steps:\n      - uses: actions/checkout@v4\n"
             "      - uses: golangci/golangci-lint-action@v6\n        with:\n          version: "
             "v1.57\n"))
    b.answer("Okay. Note that go.mod says `go 1.21` and CI takes its image from a repository "
             "variable, so I can't see which toolchain it runs. If it's 1.22+ I'll bump the "
             "`go` line together with the first range-over-int loop.")

    # 4 -- correction (user): no, I meant Go 1.21
    b.user("no, I meant stay on Go 1.21 — CI still builds with golang:1.21.9-bookworm, so no "
           "range-over-int and no go.mod bump. Sorry, mixed it up with another repo.")
    b.tools(("run", {"cmd": "go version && go env GOTOOLCHAIN"},
             "go version go1.21.9 linux/amd64\nlocal"),
            ("grep", {"pattern": "for .* := range [0-9a-zA-Z_.]+ *{$", "path": "."},
             "bucket_test.go:52:\t\tfor _, tt := range tests {\nbucket_test.go:60:\t\t\tfor i := 0;"
             " i < tt.calls; i++ {\nlimiter.go:104:\tfor _, k := range keys {\n"
             "internal/window/ring.go:43:\tfor i := int64(0); i < steps; i++ {\n"
             "internal/window/ring.go:57:\tfor _, v := range r.slots {"))
    b.answer("Understood, staying on Go 1.21: classic three-clause loops, no loopvar "
             "assumptions (I'll copy loop variables into goroutines explicitly). The local "
             "toolchain is 1.21.9 with GOTOOLCHAIN=local, so nothing newer can slip in.")

    # 5 -- constructor name, first value (user); write window.go
    b.user("Constructor name: NewWindowLimiter. Go ahead and write the limiter.")
    b.tools(("apply_patch", {"patch": diff("window.go", "", window_v1)},
             "A window.go\nPatch applied: 1 file changed, "
             f"{len(window_v1.splitlines())} insertions(+)"),
            ("run", {"cmd": "go build ./... && go vet ./..."}, ""),
            preface="Writing window.go: sharded map of per-key windows, two counters each.")
    b.answer("`window.go` is in: `WindowLimiter` with 16 maphash shards, each key a `window` "
             "with its own mutex, previous/current counts and the window start; `rotate()` "
             "moves the window forward and returns the weighted previous count; `Allow` adds "
             "the current count and compares with the rate. It builds and vets clean.")

    # 6 -- reviewer (user)
    b.user("Ines Carvalho is reviewing this one. She wants table-driven tests and nothing from "
           "testify, plain testing package only.")
    b.tools(("read_file", {"path": "bucket_test.go"}, numbered(BUCKET_TEST_GO)),
            ("grep", {"pattern": "testify", "path": "."}, "(no matches)"),
            preface="Let me look at the existing test style first.")
    b.answer("The existing tests already follow that: table-driven cases with `t.Run`, a "
             "`manualClock` for time, no assertion library (and testify isn't in go.sum). "
             "I'll write the window tests the same way and reuse `newClock()`.")

    # 7 -- tests; one fails (tool)
    b.user("write the tests")
    b.tools(("apply_patch", {"patch": diff("window_test.go", "", test_v1)},
             "A window_test.go\nPatch applied: 1 file changed, "
             f"{len(test_v1.splitlines())} insertions(+)"),
            ("run", {"cmd": "go test -run 'Sliding|Bucket' -v -count=1 ."},
             go_test_v(rng, [("TestBucketAllow", True), ("TestBucketAllow/within_burst", True),
                             ("TestBucketAllow/over_burst", True), ("TestBucketAllow/refills",
                                                                     True),
                             ("TestBucketAllow/partial_refill", True),
                             ("TestBucketRetryAfter", True), ("TestBucketKeysAreIndependent",
                                                              True),
                             ("TestSlidingWindowAllow", True),
                             ("TestSlidingWindowAllow/under_rate", True),
                             ("TestSlidingWindowAllow/over_rate", True),
                             ("TestSlidingWindowAllow/next_window_half_weight", True),
                             ("TestSlidingWindowAllow/two_windows_later", True),
                             ("TestSlidingWindowRollover", False)],
                       extra_fail="    window_test.go:71: allowed 103 in one window of rate 100")))
    b.answer("The table tests pass, but the concurrent rollover test fails: 103 calls allowed "
             "in one window with a rate of 100. Something lets concurrent callers overshoot "
             "when the window rotates.")

    # 8 -- race detector (tool)
    b.user("run it with -race")
    b.tools(("run", {"cmd": "go test -race -run SlidingWindowRollover -count=1 ./..."},
             "==================\nWARNING: DATA RACE\nRead at 0x00c0001a4f28 by goroutine 9:\n"
             "  github.com/orbitlabs/throttle.(*window).rotate()\n      /src/throttle/window.go:"
             "71 +0x1f4\n  github.com/orbitlabs/throttle.(*WindowLimiter).Allow()\n      "
             "/src/throttle/window.go:84 +0x12c\n  github.com/orbitlabs/throttle."
             "TestSlidingWindowRollover.func1()\n      /src/throttle/window_test.go:60 +0x10b\n\n"
             "Previous write at 0x00c0001a4f28 by goroutine 8:\n  github.com/orbitlabs/throttle."
             "(*window).rotate()\n      /src/throttle/window.go:63 +0x2a8\n  github.com/"
             "orbitlabs/throttle.(*WindowLimiter).Allow()\n      /src/throttle/window.go:84 "
             "+0x12c\n\nGoroutine 9 (running) created at:\n  github.com/orbitlabs/throttle."
             "TestSlidingWindowRollover()\n      /src/throttle/window_test.go:55 +0x1c4\n"
             "==================\n==================\nWARNING: DATA RACE\nWrite at "
             "0x00c00012e0b8 by goroutine 12:\n  github.com/orbitlabs/throttle/internal/window."
             "(*Ring).Head()\n      /src/throttle/internal/window/ring.go:88 +0x64\n  "
             "github.com/orbitlabs/throttle/internal/window.TestRingConcurrent.func2()\n      "
             "/src/throttle/internal/window/ring_test.go:77 +0x9c\n\nPrevious write at "
             "0x00c00012e0b8 by goroutine 11:\n  github.com/orbitlabs/throttle/internal/window."
             "(*Ring).Add()\n      /src/throttle/internal/window/ring.go:67 +0xd0\n"
             "==================\n==================\nWARNING: DATA RACE\nRead at "
             "0x00c0001a4f30 by goroutine 10:\n  github.com/orbitlabs/throttle.(*window).rotate()"
             "\n      /src/throttle/window.go:71 +0x21c\n  github.com/orbitlabs/throttle."
             "(*WindowLimiter).Allow()\n      /src/throttle/window.go:84 +0x12c\n  github.com/"
             "orbitlabs/throttle.TestSlidingWindowRollover.func1()\n      /src/throttle/"
             "window_test.go:60 +0x10b\n\nPrevious write at 0x00c0001a4f30 by goroutine 11:\n  "
             "github.com/orbitlabs/throttle.(*WindowLimiter).Allow()\n      /src/throttle/"
             "window.go:94 +0x3b0\n  github.com/orbitlabs/throttle.TestSlidingWindowRollover."
             "func1()\n      /src/throttle/window_test.go:60 +0x10b\n\nGoroutine 10 (running) "
             "created at:\n  github.com/orbitlabs/throttle.TestSlidingWindowRollover()\n      "
             "/src/throttle/window_test.go:55 +0x1c4\n  testing.tRunner()\n      /usr/local/go/"
             "src/testing/testing.go:1595 +0x238\n  testing.(*T).Run.func1()\n      /usr/local/"
             "go/src/testing/testing.go:1648 +0x44\n\nGoroutine 11 (finished) created at:\n  "
             "github.com/orbitlabs/throttle.TestSlidingWindowRollover()\n      /src/throttle/"
             "window_test.go:55 +0x1c4\n  testing.tRunner()\n      /usr/local/go/src/testing/"
             "testing.go:1595 +0x238\n"
             "==================\n--- FAIL: TestSlidingWindowRollover (0.04s)\n    testing.go:"
             "1398: race detected during execution of test\nFAIL\nFAIL\tgithub.com/orbitlabs/"
             "throttle\t0.081s\n--- FAIL: TestRingConcurrent (0.01s)\n    testing.go:1398: race "
             "detected during execution of test\nFAIL\nFAIL\tgithub.com/orbitlabs/throttle/"
             "internal/window\t0.047s\nFAIL"),
            ("read_file", {"path": "internal/window/ring.go"}, numbered(RING_GO)),
            ("read_file", {"path": "window.go", "start": 55, "end": 100},
             numbered(window_v1, 55, 100)))
    b.answer("Two races. One is in the new code (window.go:63 vs :71). The other is old: "
             "`Ring.Head()` in internal/window reads the head slot without taking the ring's "
             "mutex, and the ring's concurrent test catches it now that -race runs over that "
             "package too.")

    # 9 -- diagnosis (assistant)
    b.user("explain the window one")
    b.answer("`rotate()` takes `w.mu`, rotates, then unlocks and computes the weighted count "
             "from w.prevCount after releasing w.mu. Between that unlock and the lock `Allow` "
             "takes next, another goroutine can rotate the same window, so the caller combines "
             "a previous count from one window with the current count of the next: that's the "
             "overshoot to 103. Fix: `Allow` takes `w.mu` once, and `rotate()` runs with the "
             "lock held (documented as such) and returns the weighted value computed inside.")

    # 10 -- fix and rerun
    b.user("do it, and fix the ring one too while you're there")
    ring_fixed = RING_GO.replace(
        "func (r *Ring) Head() int64 {\n\treturn r.slots[r.head]",
        "func (r *Ring) Head() int64 {\n\tr.mu.Lock()\n\tdefer r.mu.Unlock()\n\treturn "
        "r.slots[r.head]")
    b.tools(("apply_patch", {"patch": diff("window.go", window_v1, window_v2)},
             "M window.go\nPatch applied: 1 file changed, 4 insertions(+), 4 deletions(-)"),
            ("apply_patch", {"patch": diff("internal/window/ring.go", RING_GO, ring_fixed)},
             "M internal/window/ring.go\nPatch applied: 1 file changed, 2 insertions(+)"),
            ("run", {"cmd": "go test -race -count=3 ./..."},
             "ok  \tgithub.com/orbitlabs/throttle\t1.912s\nok  \tgithub.com/orbitlabs/throttle/"
             "httpx\t0.388s\n?   \tgithub.com/orbitlabs/throttle/integration\t[no test files]\n"
             "ok  \tgithub.com/orbitlabs/throttle/internal/window\t0.522s"))
    b.answer("Both fixed: `Allow` holds the window lock across rotate-and-count, and "
             "`Ring.Head()` locks. `go test -race -count=3 ./...` is clean (integration has no "
             "tests without its build tag).")

    b.user("could the limiter use internal/window.Ring for its counters instead of its own "
           "two fields? less code to maintain")
    b.tools(("read_file", {"path": "internal/window/ring_test.go"}, numbered(RING_TEST_GO)),
            ("grep", {"pattern": "window\\.NewRing|window\\.Ring", "path": "."},
             "store_memory.go:9:// (no uses; the ring backs the v1 metrics exporter, removed "
             "in 1.2)\n"),
            ("run", {"cmd": "go test -run '^$' -bench RingAdd -benchmem ./internal/window/"},
             "goos: linux\ngoarch: amd64\npkg: github.com/orbitlabs/throttle/internal/window\n"
             "cpu: Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz\nBenchmarkRingAdd-2   \t"
             "31750201\t        37.8 ns/op\t       0 B/op\t       0 allocs/op\nPASS\nok  \t"
             "github.com/orbitlabs/throttle/internal/window\t1.251s"))
    b.answer("It could, but I wouldn't. The ring is a general N-slot counter: for the "
             "two-window estimate we need exactly two slots and the start time, which is what "
             "the window struct already holds in three fields. Using the ring would add its "
             "own mutex under the window's, an allocation per key for the slot slice, and "
             "~38 ns per Add. The ring has no users left either (only a comment mentions it); "
             "I'd rather leave it alone in this PR.")

    # 11 -- correction (user): no, I meant NewSlidingLimiter
    b.user("oh wait, no, I meant NewSlidingLimiter — it should read like NewBucketLimiter, "
           "algorithm name first. The type should follow.")
    b.tools(("grep", {"pattern": "WindowLimiter", "path": "."},
             "window.go:14:// WindowLimiter approximates a sliding window from the current and "
             "the\nwindow.go:16:type WindowLimiter struct {\nwindow.go:35:// NewWindowLimiter "
             "returns a sliding-window limiter.\nwindow.go:36:func NewWindowLimiter(opts Options)"
             " (*WindowLimiter, error) {\nwindow.go:40:\tl := &WindowLimiter{opts: opts, seed: "
             "maphash.MakeSeed()}\nwindow.go:47:func (l *WindowLimiter) shardFor(key string) "
             "*shard {\nwindow.go:52:func (l *WindowLimiter) get(key string, now time.Time) "
             "*window {\nwindow.go:80:func (l *WindowLimiter) Allow(ctx context.Context, key "
             "string) (Decision, error) {\nwindow.go:101:func (l *WindowLimiter) Close() error "
             "{ return nil }\nwindow_test.go:25:\t\t\tl, err := NewWindowLimiter(Options{Rate: "
             "tt.rate, Clock: clk})\nwindow_test.go:45:\tl, _ := NewWindowLimiter(Options{Rate: "
             "100, Clock: clk})"),
            ("apply_patch", {"patch": diff("window.go", window_v2, window_v3) +
                             diff("window_test.go", test_v1, test_v2)},
             "M window.go\nM window_test.go\nPatch applied: 2 files changed, 11 insertions(+), "
             "11 deletions(-)"),
            ("run", {"cmd": "go build ./... && go test -count=1 ."},
             "ok  \tgithub.com/orbitlabs/throttle\t0.734s"))
    b.answer("Renamed: the constructor is now `NewSlidingLimiter` and the type "
             "`SlidingLimiter`, in window.go and the tests. Builds, tests pass.")

    b.user("nice")
    b.answer("👍")

    # 13 -- linter, first line length (tool)
    b.user("run the linter")
    b.tools(("run", {"cmd": "golangci-lint run ./..."},
             "window.go:92:121: line is 131 characters (lll)\n\t\treturn Decision{Allowed: "
             "false, RetryAfter: reset.Sub(now), ResetAt: reset}, nil\nwindow.go:14:1: comment on "
             "exported type SlidingLimiter should be of the form \"SlidingLimiter ...\" (with "
             "optional leading article) (revive)\nbucket.go:48:121: line is 124 characters (lll)"
             "\n\t\tbk.tokens = math.Min(float64(b.opts.Burst), bk.tokens+float64(elapsed."
             "Nanoseconds())*b.perNanosecond())\nlimiter.go:79:121: line is 126 characters (lll)"
             "\nfunc Middleware(l Limiter, key KeyFunc, fn func(ctx context.Context) error) "
             "func(context.Context) error {\nstore_redis.go:66:121: line is 122 characters (lll)"
             "\n4 issues:\n* lll: 4\n* revive: 1"),
            ("read_file", {"path": ".golangci.yml"}, GOLANGCI_V1))
    b.answer("Five findings: four long lines (the limit is 120 columns, tests excluded) and the "
             "doc comment on the type that still starts with the old name. Three of the long "
             "lines predate this branch (bucket.go, limiter.go, store_redis.go).")

    # 14
    b.user("fix ours, leave the old ones for a separate PR")
    b.tools(("apply_patch", {"patch": "--- a/window.go\n+++ b/window.go\n@@ -11,7 +11,7 @@\n"
                             " // DefaultShards is the number of key shards of a SlidingLimiter."
                             "\n const DefaultShards = 16\n \n-// WindowLimiter approximates a "
                             "sliding window from the current and the\n+// SlidingLimiter "
                             "approximates a sliding window from the current and the\n // "
                             "previous fixed window: count = prev*(1-elapsed) + cur.\n type "
                             "SlidingLimiter struct {\n@@ -89,7 +89,11 @@\n \tcount := weighted "
                             "+ float64(w.curCount)\n \tif count+1 > float64(l.opts.Rate) {\n"
                             " \t\treset := w.start.Add(l.opts.Period)\n-\t\treturn Decision"
                             "{Allowed: false, RetryAfter: reset.Sub(now), ResetAt: reset}, nil"
                             "\n+\t\treturn Decision{\n+\t\t\tAllowed:    false,\n+\t\t\t"
                             "RetryAfter: reset.Sub(now),\n+\t\t\tResetAt:    reset,\n+\t\t}, "
                             "nil\n \t}\n"},
             "M window.go\nPatch applied: 1 file changed, 6 insertions(+), 2 deletions(-)"),
            ("run", {"cmd": "golangci-lint run ./... | tail -4"},
             "bucket.go:48:121: line is 124 characters (lll)\nlimiter.go:79:121: line is 126 "
             "characters (lll)\nstore_redis.go:66:121: line is 122 characters (lll)\n3 issues:\n"
             "* lll: 3"))
    b.answer("Our two findings are gone; the three pre-existing long lines remain for the "
             "separate PR.")

    # 15 -- benchmark (tool)
    b.user("benchmarks? compare with the bucket")
    bench_src = ("\nfunc BenchmarkSlidingAllow(b *testing.B) {\n\tl, _ := NewSlidingLimiter("
                 "Options{Rate: 1 << 30})\n\tctx := context.Background()\n\tb.ReportAllocs()\n"
                 "\tb.RunParallel(func(pb *testing.PB) {\n\t\ti := 0\n\t\tfor pb.Next() {\n"
                 "\t\t\t_, _ = l.Allow(ctx, keys[i%len(keys)])\n\t\t\ti++\n\t\t}\n\t})\n}\n")
    b.tools(("apply_patch", {"patch": "--- a/window_test.go\n+++ b/window_test.go\n@@ -72,0 +73,"
                             "14 @@\n" + "".join("+" + x + "\n" for x in bench_src.splitlines())},
             "M window_test.go\nPatch applied: 1 file changed, 14 insertions(+)"),
            ("run", {"cmd": "go test -run '^$' -bench 'Allow$' -benchmem -count=1 -cpu 2 ."},
             "goos: linux\ngoarch: amd64\npkg: github.com/orbitlabs/throttle\ncpu: Intel(R) Xeon"
             "(R) Platinum 8375C CPU @ 2.90GHz\nBenchmarkBucketAllow-2    \t 6210488\t       "
             "191.7 ns/op\t       0 B/op\t       0 allocs/op\nBenchmarkSlidingAllow-2   \t "
             "9871234\t       118.4 ns/op\t       0 B/op\t       0 allocs/op\nPASS\nok  \t"
             "github.com/orbitlabs/throttle\t3.402s"))
    b.answer("On 2 CPUs the sliding limiter is faster than the bucket (no allocations in "
             "either): sharding removes the single map mutex the bucket contends on. The "
             "bucket sits at 191.7 ns/op.")

    # 16 -- Redis store (tool)
    b.user("Now the Redis side. How does the store pick up its connection?")
    b.tools(("read_file", {"path": "store_redis.go"}, numbered(STORE_REDIS_GO)),
            ("grep", {"pattern": "Prefix", "path": "."},
             "store_redis.go:21:\tPrefix string // key prefix; see the design notes for the "
             "default\nstore_redis.go:49:\treturn &RedisStore{client: c, prefix: o.Prefix, "
             "clock: o.Clock}, nil\nintegration/store_redis_integration_test.go:23:\t\tPrefix: "
             "\"it:\" + t.Name() + \":\","),
            ("read_file", {"path": "integration/docker-compose.yml"},
             "services:\n  redis:\n    image: redis:7-alpine\n    ports:\n      - "
             "\"127.0.0.1:6379:6379\"\n    command: [\"redis-server\", \"--save\", \"\", "
             "\"--appendonly\", \"no\"]\n"))
    b.answer("From `RedisOptions.URL`, or the environment variable when the URL is empty; it "
             "pings once at construction. The prefix has no default yet: an empty Prefix means "
             "bare keys, so v1 and v2 would collide. I'll default it to the design's v2 prefix "
             "when empty.")

    # 17 -- AllowN decision (assistant)
    b.user("the doc asks about batch callers — the webhook thing sends up to 50 at once. what "
           "would you do?")
    b.answer("I'd keep the existing `Allow(ctx, key)` signature untouched and add "
             "`AllowN(ctx, key, n)` on `SlidingLimiter` (and later on the bucket), taking n "
             "permits at once or none. `Allow` becomes `AllowN(ctx, key, 1)`. Not adding it to "
             "the `Limiter` interface yet avoids breaking other implementations outside this "
             "repo.")

    b.user("agreed, add it")
    allow_n = ("\n// AllowN takes n permits for key at once, or none.\nfunc (l *SlidingLimiter) "
               "AllowN(ctx context.Context, key string, n int64) (Decision, error) {\n\tif err "
               ":= ctx.Err(); err != nil {\n\t\treturn Decision{}, err\n\t}\n\tnow := l.opts."
               "Clock.Now()\n\tw := l.get(key, now)\n\tw.mu.Lock()\n\tdefer w.mu.Unlock()\n"
               "\tweighted := w.rotate(now, l.opts.Period)\n\tcount := weighted + float64(w."
               "curCount)\n\tif count+float64(n) > float64(l.opts.Rate) {\n\t\treset := w.start."
               "Add(l.opts.Period)\n\t\treturn Decision{\n\t\t\tAllowed:    false,\n\t\t\t"
               "RetryAfter: reset.Sub(now),\n\t\t\tResetAt:    reset,\n\t\t}, nil\n\t}\n\tw."
               "curCount += n\n\treturn Decision{\n\t\tAllowed:   true,\n\t\tRemaining: l.opts."
               "Rate - int64(count) - n,\n\t\tResetAt:   w.start.Add(2 * l.opts.Period),\n\t}, "
               "nil\n}\n")
    b.tools(("apply_patch", {"patch": "--- a/window.go\n+++ b/window.go\n@@ -104,0 +105,27 @@\n"
                             + "".join("+" + x + "\n" for x in allow_n.splitlines())},
             "M window.go\nPatch applied: 1 file changed, 27 insertions(+)"),
            ("run", {"cmd": "go build ./... && go test -race -count=1 ."},
             "ok  \tgithub.com/orbitlabs/throttle\t1.288s"))
    b.answer("Added `AllowN` with the all-or-nothing semantics; `Allow` can delegate to it in "
             "a follow-up once Ines has seen the shape. Tests and race detector pass.")

    window_final = window_v3.replace(
        "// WindowLimiter approximates", "// SlidingLimiter approximates").replace(
        "\t\treturn Decision{Allowed: false, RetryAfter: reset.Sub(now), ResetAt: reset}, nil",
        "\t\treturn Decision{\n\t\t\tAllowed:    false,\n\t\t\tRetryAfter: reset.Sub(now),"
        "\n\t\t\tResetAt:    reset,\n\t\t}, nil") + allow_n

    b.user("show me the whole window.go as it stands, I want to read it in one go")
    b.tools(("read_file", {"path": "window.go"}, numbered(window_final)),
            ("run", {"cmd": "go doc -all . SlidingLimiter"},
             "package throttle // import \"github.com/orbitlabs/throttle\"\n\ntype "
             "SlidingLimiter struct {\n\t// Has unexported fields.\n}\n    SlidingLimiter "
             "approximates a sliding window from the current and the previous\n    fixed "
             "window: count = prev*(1-elapsed) + cur.\n\nfunc NewSlidingLimiter(opts Options) "
             "(*SlidingLimiter, error)\n    NewSlidingLimiter returns a sliding-window limiter."
             "\n\nfunc (l *SlidingLimiter) Allow(ctx context.Context, key string) (Decision, "
             "error)\n    Allow implements Limiter.\n\nfunc (l *SlidingLimiter) AllowN(ctx "
             "context.Context, key string, n int64) (Decision, error)\n    AllowN takes n "
             "permits for key at once, or none.\n\nfunc (l *SlidingLimiter) Close() error\n"
             "    Close implements Limiter.\n"))
    b.answer("That's the full file (about 130 lines) and its public surface: the constructor, "
             "`Allow`, `AllowN` and `Close`. One thing I notice reading it whole: `get()` "
             "creates windows but nothing ever removes them, so an idle key stays in memory "
             "forever. The bucket has the same property; the memory store is the only place "
             "that evicts.")

    b.user("how does the memory store do its eviction? maybe we reuse it")
    b.tools(("read_file", {"path": "store_memory.go"}, numbered(STORE_MEMORY_GO)),
            ("grep", {"pattern": "maybeSweep|lastSweep", "path": "."},
             "store_memory.go:16:\tlastSweep time.Time\nstore_memory.go:32:\tm.maybeSweep(now)\n"
             "store_memory.go:58:func (m *memoryStore) maybeSweep(now time.Time) {\n"
             "store_memory.go:62:\tm.lastSweep = now"),
            ("read_file", {"path": "store_memory_test.go", "start": 1, "end": 45},
             numbered("package throttle\n\nimport (\n\t\"context\"\n\t\"testing\"\n\t\"time\"\n)"
                      "\n\nfunc TestMemoryStoreSweep(t *testing.T) {\n\tclk := newClock()\n\ts "
                      ":= newMemoryStore(clk)\n\tctx := context.Background()\n\tfor i := int64(0)"
                      "; i < 5; i++ {\n\t\tif _, err := s.Incr(ctx, \"k\", i, 1, time.Second); "
                      "err != nil {\n\t\t\tt.Fatal(err)\n\t\t}\n\t}\n\tif n := s.Len(); n != 5"
                      " {\n\t\tt.Fatalf(\"Len = %d, want 5\", n)\n\t}\n\tclk.Advance(2 * "
                      "time.Minute)\n\t_, _ = s.Incr(ctx, \"other\", 0, 1, time.Second)\n\tif n "
                      ":= s.Len(); n != 1 {\n\t\tt.Fatalf(\"after sweep Len = %d, want 1\", n)"
                      "\n\t}\n}\n\nfunc TestMemoryStoreExpiry(t *testing.T) {\n\tclk := "
                      "newClock()\n\ts := newMemoryStore(clk)\n\tctx := context.Background()\n"
                      "\t_, _ = s.Incr(ctx, \"k\", 0, 3, time.Second)\n\tclk.Advance(1500 * "
                      "time.Millisecond)\n\tif v, _ := s.Get(ctx, \"k\", 0); v != 0 {\n\t\t"
                      "t.Errorf(\"expired counter = %d, want 0\", v)\n\t}\n}\n")))
    b.answer("The memory store sweeps lazily: at most once a minute, inside `Incr`, it drops "
             "counters whose expiry passed. For the sliding limiter I'd do the same per shard: "
             "remember the last sweep time in the shard and, under the shard lock, delete "
             "windows that started more than ten periods ago — the design note's eviction "
             "rule. I'd keep that for a follow-up PR so this one stays reviewable.")

    b.user("fine, follow-up. does the http middleware work with it unchanged?")
    b.tools(("read_file", {"path": "httpx/middleware.go"}, numbered(MIDDLEWARE_GO)),
            ("read_file", {"path": "httpx/middleware_test.go"}, numbered(MIDDLEWARE_TEST_GO)),
            ("run", {"cmd": "go test -v -count=1 ./httpx/"},
             go_test_v(rng, [("TestHandler", True), ("TestHandler/allowed", True),
                             ("TestHandler/limited", True), ("TestHandler/no_key_skips", True),
                             ("TestHandler/limiter_down_fails_open", True),
                             ("TestByRemoteIP", True)],
                       pkg="github.com/orbitlabs/throttle/httpx")))
    b.answer("Yes: `httpx.Handler` only needs a `throttle.Limiter`, and the sliding limiter "
             "satisfies it. It rounds `RetryAfter` up to whole seconds for the header and fails "
             "open when the limiter errors. Its tests use a fixed fake limiter, so they don't "
             "exercise ours; an end-to-end case with the real sliding limiter would be cheap.")

    b.user("add one")
    e2e = ("\nfunc TestHandlerWithSlidingLimiter(t *testing.T) {\n\tl, err := throttle."
           "NewSlidingLimiter(throttle.Options{Rate: 2, Period: time.Second})\n\tif err != nil "
           "{\n\t\tt.Fatal(err)\n\t}\n\tok := http.HandlerFunc(func(w http.ResponseWriter, r "
           "*http.Request) { w.WriteHeader(204) })\n\th := Handler(l, Options{Key: ByHeader("
           "\"X-User\")}, ok)\n\twant := []int{204, 204, 429}\n\tfor i, code := range want {\n"
           "\t\treq := httptest.NewRequest(\"GET\", \"/\", nil)\n\t\treq.Header.Set(\"X-User\", "
           "\"u1\")\n\t\trec := httptest.NewRecorder()\n\t\th.ServeHTTP(rec, req)\n\t\tif rec."
           "Code != code {\n\t\t\tt.Errorf(\"request %d: status %d, want %d\", i, rec.Code, code)"
           "\n\t\t}\n\t}\n}\n")
    b.tools(("apply_patch", {"patch": "--- a/httpx/middleware_test.go\n+++ b/httpx/"
                             "middleware_test.go\n@@ -71,0 +72,21 @@\n" + "".join(
                                 "+" + x + "\n" for x in e2e.splitlines())},
             "M httpx/middleware_test.go\nPatch applied: 1 file changed, 21 insertions(+)"),
            ("run", {"cmd": "go test -count=1 -run TestHandlerWithSlidingLimiter -v ./httpx/"},
             go_test_v(rng, [("TestHandlerWithSlidingLimiter", True)],
                       pkg="github.com/orbitlabs/throttle/httpx")))
    b.answer("Added `TestHandlerWithSlidingLimiter`: two requests pass, the third gets 429. "
             "Passes.")

    b.user("what's coverage like now?")
    b.tools(("run", {"cmd": "go test -count=1 -coverprofile=/tmp/c.out ./... >/dev/null && go "
                     "tool cover -func=/tmp/c.out"}, cover_func(rng)),
            ("run", {"cmd": "go test -count=1 -cover ./..."},
             "ok  \tgithub.com/orbitlabs/throttle\t0.845s\tcoverage: 71.9% of statements\n"
             "ok  \tgithub.com/orbitlabs/throttle/httpx\t0.214s\tcoverage: 94.1% of statements\n"
             "?   \tgithub.com/orbitlabs/throttle/integration\t[no test files]\nok  \tgithub.com/"
             "orbitlabs/throttle/internal/window\t0.103s\tcoverage: 97.0% of statements"))
    b.answer("The root package is at ~72 % because the Redis store only runs under the "
             "integration tag (0 % here); the window code is fully covered except one branch of "
             "`rotate()`. httpx 94 %, internal/window 97 %.")

    b.user("and where does the time go in the benchmark? just curious")
    b.tools(("run", {"cmd": "go test -run '^$' -bench SlidingAllow -cpu 2 -cpuprofile "
                     "/tmp/cpu.out . >/dev/null && go tool pprof -top -nodecount=16 /tmp/cpu.out"},
             pprof_top(rng)),
            ("run", {"cmd": "go test -run '^$' -bench SlidingAllow -cpu 1,2 -count=1 ."},
             "goos: linux\ngoarch: amd64\npkg: github.com/orbitlabs/throttle\ncpu: Intel(R) "
             "Xeon(R) Platinum 8375C CPU @ 2.90GHz\nBenchmarkSlidingAllow     \t12077342\t        "
             "97.3 ns/op\nBenchmarkSlidingAllow-2   \t 9904418\t       119.1 ns/op\nPASS\nok  \t"
             "github.com/orbitlabs/throttle\t2.911s"))
    b.answer("Mostly locking (the per-window mutex under contention from both CPUs), then "
             "maphash and time arithmetic. With the single benchmark key all goroutines hit one "
             "window, which is the worst case; real traffic spreads over keys and shards.")

    # 19 -- correction: integration tests
    b.user("run the tests against redis")
    b.tools(("run", {"cmd": "go test -count=1 -run Redis ./..."},
             "ok  \tgithub.com/orbitlabs/throttle\t0.012s [no tests to run]\nok  \tgithub.com/"
             "orbitlabs/throttle/httpx\t0.009s [no tests to run]\n?   \tgithub.com/orbitlabs/"
             "throttle/integration\t[no test files]\nok  \tgithub.com/orbitlabs/throttle/"
             "internal/window\t0.008s [no tests to run]"),
            ("read_file", {"path": "store_memory.go", "start": 1, "end": 40},
             numbered("package throttle\n\nimport (\n\t\"context\"\n\t\"sync\"\n\t\"time\"\n)\n\n"
                      "type memoryStore struct {\n\tmu     sync.Mutex\n\tclock  Clock\n\tvals   "
                      "map[string]memVal\n\tsweepT *time.Ticker\n}\n\ntype memVal struct {\n\tn   "
                      "   int64\n\texpires time.Time\n}\n\nfunc newMemoryStore(c Clock) *memoryStore"
                      " {\n\treturn &memoryStore{clock: c, vals: make(map[string]memVal)}\n}\n\n"
                      "func (m *memoryStore) Incr(_ context.Context, key string, slot int64, n "
                      "int64, ttl time.Duration) (int64, error) {\n\tm.mu.Lock()\n\tdefer m.mu."
                      "Unlock()\n\tk := key + \":\" + itoa(slot)\n\tv := m.vals[k]\n\tnow := m."
                      "clock.Now()\n\tif now.After(v.expires) {\n\t\tv = memVal{}\n\t}\n\tv.n += n"
                      "\n\tv.expires = now.Add(ttl)\n\tm.vals[k] = v\n\treturn v.n, nil\n}\n")))
    b.answer("Nothing ran: the Redis tests are behind the `integration` build tag, and the "
             "unit tests use the memory store (read above). Want me to start Redis with the "
             "compose file and run the tagged ones?")

    b.user("no, I meant the integration suite with the tag, yes. the unit ones are fine")
    b.tools(("run", {"cmd": "docker compose -f integration/docker-compose.yml up -d && sleep 2 "
                     "&& docker compose -f integration/docker-compose.yml ps"},
             "[+] Running 2/2\n ✔ Network integration_default    Created                    "
             "0.1s\n ✔ Container integration-redis-1  Started                    0.4s\nNAME   "
             "               IMAGE            COMMAND                  SERVICE   CREATED       "
             "  STATUS         PORTS\nintegration-redis-1   redis:7-alpine   \"docker-entrypoint"
             ".s…\"   redis     2 seconds ago   Up 1 second    127.0.0.1:6379->6379/tcp"),
            ("run", {"cmd": "THROTTLE_REDIS_URL=redis://127.0.0.1:6379/0 go test -tags "
                     "integration -count=1 -v ./integration/"},
             go_test_v(rng, [("TestRedisStoreIntegration", True),
                             ("TestRedisStoreIntegration/incr_sets_ttl", True),
                             ("TestRedisStoreIntegration/get_absent_is_zero", True),
                             ("TestRedisStoreIntegration/keys_are_prefixed", True),
                             ("TestRedisSlidingShared", True),
                             ("TestRedisSlidingShared/two_limiters_one_budget", True)],
                       pkg="github.com/orbitlabs/throttle/integration")),
            ("run", {"cmd": "docker compose -f integration/docker-compose.yml down"},
             "[+] Running 2/2\n ✔ Container integration-redis-1  Removed                    "
             "0.3s\n ✔ Network integration_default    Removed                    0.2s"))
    b.answer("Integration suite passes against a real Redis 7 (6 tests including two "
             "limiters sharing one budget); container torn down again.")

    # 21 -- ticket (user)
    b.user("The PR needs to reference THR-318 in the title, that's the ticket for this. What "
           "does the branch look like now?")
    b.tools(("run", {"cmd": "git status -s && git diff --stat main"},
             " M internal/window/ring.go\n?? window.go\n?? window_test.go\n "
             "internal/window/ring.go |   2 +\n window.go               | 131 "
             "++++++++++++++++++++++++++++++\n window_test.go          |  87 "
             "++++++++++++++++++++\n 3 files changed, 220 insertions(+)"),
            ("run", {"cmd": "git diff main -- internal/window/ring.go"},
             diff("internal/window/ring.go", RING_GO, ring_fixed)))
    b.answer("Nothing committed yet: the ring fix plus the two new files, 220 lines added. I'd "
             "split it into two commits (ring race fix, then the sliding limiter) so the fix "
             "can be cherry-picked.")

    b.user("yes, two commits")
    b.tools(("run", {"cmd": "git add internal/window/ring.go && git commit -m 'window: Ring."
                     "Head takes the lock'"},
             "[feat/sliding-window-v2 3f0a9d2] window: Ring.Head takes the lock\n 1 file "
             "changed, 2 insertions(+)"),
            ("run", {"cmd": "git add window.go window_test.go && git commit -m 'throttle: "
                     "sliding-window limiter (two-window approximation)'"},
             "[feat/sliding-window-v2 b71c44e] throttle: sliding-window limiter (two-window "
             "approximation)\n 2 files changed, 218 insertions(+)\n create mode 100644 "
             "window.go\n create mode 100644 window_test.go"))
    b.answer("Two commits on the branch: 3f0a9d2 (ring lock) and b71c44e (the limiter).")

    b.user("thanks, that was quick")
    b.answer("Any time.")

    # 24 -- CI run on the pushed branch
    b.user("I pushed it. CI is red, can you see why?")
    b.tools(("run", {"cmd": "gh run list --branch feat/sliding-window-v2 --limit 3"},
             "STATUS  TITLE                                          WORKFLOW  BRANCH       "
             "           EVENT  ID          ELAPSED  AGE\nX       throttle: sliding-window "
             "limiter (two-wi...  ci        feat/sliding-window-v2  push   9034411820  1m48s    "
             "3m"),
            ("run", {"cmd": "gh run view 9034411820 --log-failed | tail -40"},
             ci_log(rng, 9034411820, ok=False)))
    b.answer("The unit tests pass in CI; the failure is the integration package: it can't "
             "reach Redis at 127.0.0.1:6379. In CI the Redis service is reachable by its "
             "service name, and the workflow sets the URL for the test step, but the "
             "integration test ignores the variable and dials localhost.")

    b.user("fix the test to use the env var")
    it_old = ("func redisURL(t *testing.T) string {\n\treturn \"redis://127.0.0.1:6379/0\"\n}\n")
    it_new = ("func redisURL(t *testing.T) string {\n\tif u := os.Getenv(\"THROTTLE_REDIS_URL\"); "
              "u != \"\" {\n\t\treturn u\n\t}\n\tt.Skip(\"THROTTLE_REDIS_URL not set\")\n\treturn "
              "\"\"\n}\n")
    b.tools(("read_file", {"path": "integration/store_redis_integration_test.go", "start": 1,
                           "end": 30},
             numbered("//go:build integration\n\npackage integration\n\nimport (\n\t\"context\"\n"
                      "\t\"testing\"\n\t\"time\"\n\n\t\"github.com/orbitlabs/throttle\"\n)\n\n"
                      + it_old + "\nfunc TestRedisStoreIntegration(t *testing.T) {\n\tctx := "
                      "context.Background()\n\ts, err := throttle.NewRedisStore(ctx, throttle."
                      "RedisOptions{\n\t\tURL:    redisURL(t),\n\t\tPrefix: \"it:\" + t.Name() + "
                      "\":\",\n\t})\n\tif err != nil {\n\t\tt.Fatal(err)\n\t}\n\tdefer s.Close()\n"
                      "\tt.Run(\"incr_sets_ttl\", func(t *testing.T) {\n\t\tn, err := s.Incr(ctx, "
                      "\"k\", 1, 1, time.Second)\n")),
            ("apply_patch", {"patch": diff("integration/store_redis_integration_test.go",
                                           it_old, it_new)},
             "M integration/store_redis_integration_test.go\nPatch applied: 1 file changed, 6 "
             "insertions(+), 1 deletion(-)"),
            ("run", {"cmd": "go vet -tags integration ./integration/"}, ""))
    b.answer("The integration test now reads the URL from the environment and skips when it's "
             "unset, so it follows whatever the workflow provides.")

    b.user("before I forget: does the repo have a PR template? fill in what you can")
    b.tools(("read_file", {"path": ".github/pull_request_template.md"},
             "## What\n\n<!-- One paragraph: what changes for users of the library. -->\n\n"
             "## Why\n\n<!-- Link the ticket. -->\n\n## How it was tested\n\n- [ ] `go test "
             "-race ./...`\n- [ ] integration suite (`-tags integration`, needs Redis)\n- [ ] "
             "benchmarks before/after for hot paths\n\n## Compatibility\n\n- [ ] no breaking "
             "change to exported API (or the changelog says so)\n- [ ] go.mod `go` line "
             "unchanged (or explain)\n\n## Checklist\n\n- [ ] CHANGELOG.md under Unreleased\n"
             "- [ ] README updated if user-facing\n- [ ] examples compile (`go test -run "
             "Example`)\n"),
            ("run", {"cmd": "git log --format='%h %s' main..HEAD"},
             "3f0a9d2 window: Ring.Head takes the lock\nb71c44e throttle: sliding-window limiter "
             "(two-window approximation)\n5d02ab7 integration: read the Redis URL from the "
             "environment"),
            ("read_file", {"path": "integration/store_redis_integration_test.go", "start": 30,
                           "end": 95},
             numbered("\t\tif err != nil || n != 1 {\n\t\t\tt.Fatalf(\"Incr = %d, %v\", n, err)"
                      "\n\t\t}\n\t})\n\tt.Run(\"get_absent_is_zero\", func(t *testing.T) {\n\t\t"
                      "v, err := s.Get(ctx, \"nope\", 1)\n\t\tif err != nil || v != 0 {\n\t\t\t"
                      "t.Fatalf(\"Get = %d, %v\", v, err)\n\t\t}\n\t})\n\tt.Run(\"keys_are_"
                      "prefixed\", func(t *testing.T) {\n\t\t_, _ = s.Incr(ctx, \"p\", 7, 1, "
                      "time.Second)\n\t\tkeys, err := rawClient(t).Keys(ctx, \"it:*p:7\").Result()"
                      "\n\t\tif err != nil || len(keys) != 1 {\n\t\t\tt.Fatalf(\"keys = %v, %v\", "
                      "keys, err)\n\t\t}\n\t})\n}\n\nfunc TestRedisSlidingShared(t *testing.T) {"
                      "\n\tctx := context.Background()\n\tt.Run(\"two_limiters_one_budget\", func("
                      "t *testing.T) {\n\t\tmk := func() throttle.Limiter {\n\t\t\ts, err := "
                      "throttle.NewRedisStore(ctx, throttle.RedisOptions{URL: redisURL(t), Prefix: "
                      "\"it:shared:\"})\n\t\t\tif err != nil {\n\t\t\t\tt.Fatal(err)\n\t\t\t}\n"
                      "\t\t\tl, _ := throttle.NewBucketLimiter(throttle.Options{Rate: 5, Store: s})"
                      "\n\t\t\treturn l\n\t\t}\n\t\ta, b := mk(), mk()\n\t\tdefer a.Close()\n"
                      "\t\tdefer b.Close()\n\t\tallowed := 0\n\t\tfor i := 0; i < 10; i++ {\n"
                      "\t\t\tl := a\n\t\t\tif i%2 == 1 {\n\t\t\t\tl = b\n\t\t\t}\n\t\t\tif d, "
                      "_ := l.Allow(ctx, \"k\"); d.Allowed {\n\t\t\t\tallowed++\n\t\t\t}\n\t\t}"
                      "\n\t\tif allowed > 5 {\n\t\t\tt.Fatalf(\"allowed %d across replicas, want "
                      "<= 5\", allowed)\n\t\t}\n\t})\n}\n", 30)))
    b.answer("There is one. I can fill What/How-tested/Compatibility/Checklist from what we "
             "did (race tests, integration suite, benchmarks, changelog under Unreleased, "
             "README, examples). One thing I noticed reading the integration tests: the "
             "\"shared\" test builds bucket limiters on the Redis store, so it checks the "
             "bucket across replicas, not the sliding limiter, despite its name.")

    # 26 -- rebase; the linter limit changed on main (tool, superseded)
    b.user("Ines merged a lint config change on main this morning, rebase onto it before I "
           "push again")
    golangci_v2 = GOLANGCI_V1.replace("line-length: 120", "line-length: 140")
    b.tools(("run", {"cmd": "git fetch origin && git rebase origin/main"},
             "From github.com:orbitlabs/throttle\n   4be1d07..2c9e1f8  main       -> "
             "origin/main\nSuccessfully rebased and updated refs/heads/feat/sliding-window-v2."),
            ("run", {"cmd": "git log --oneline origin/main -3"},
             "2c9e1f8 lint: relax lll for long signatures\n4be1d07 httpx: pass Retry-After "
             "through as seconds\na90c3e2 bucket: avoid float drift on long idle periods"),
            ("read_file", {"path": ".golangci.yml"}, golangci_v2),
            ("run", {"cmd": "golangci-lint run ./..."}, ""))
    b.answer("Rebased onto origin/main (2c9e1f8). The linter limit is wider now, so the three "
             "old long lines pass as well and the lint run is clean — no separate PR needed "
             "for them.")

    # 27 -- README section
    b.user("add a README section for the new limiter, short")
    readme_add = ("\n## Sliding window\n\n```go\nl, err := throttle.NewSlidingLimiter("
                  "throttle.Options{Rate: 100, Period: time.Second})\nif err != nil {\n\t"
                  "log.Fatal(err)\n}\nd, _ := l.Allow(ctx, userID)\nif !d.Allowed {\n\t"
                  "w.Header().Set(\"Retry-After\", strconv.Itoa(int(d.RetryAfter.Seconds())+1))\n"
                  "}\n```\n\nAt most `Rate` calls in any rolling `Period` (estimated from the "
                  "current and previous fixed windows). `AllowN` takes several permits at "
                  "once. With a Redis store, limits are shared across replicas.\n")
    b.tools(("read_file", {"path": "README.md", "start": 1, "end": 40},
             numbered("# throttle\n\nRate limiters for Go services: a token bucket today, more "
                      "algorithms behind one interface.\n\n```go\nl, _ := throttle."
                      "NewBucketLimiter(throttle.Options{Rate: 10, Burst: 20})\nd, _ := l.Allow("
                      "ctx, \"user:42\")\n```\n\n## Stores\n\nBy default state lives in process "
                      "memory. For limits shared across replicas use the Redis store:\n\n```go\n"
                      "s, err := throttle.NewRedisStore(ctx, throttle.RedisOptions{})\n```\n\n"
                      "## Middleware\n\nSee `httpx` for an `http.Handler` wrapper that answers "
                      "429 with `Retry-After`.\n")),
            ("apply_patch", {"patch": "--- a/README.md\n+++ b/README.md\n@@ -10,0 +11,19 @@\n"
                             + "".join("+" + x + "\n" for x in readme_add.splitlines())},
             "M README.md\nPatch applied: 1 file changed, 19 insertions(+)"))
    b.answer("Added a short “Sliding window” section after the intro example: constructor, "
             "Allow with Retry-After, one paragraph on semantics, AllowN and Redis.")

    b.user("changelog entry too")
    b.tools(("read_file", {"path": "CHANGELOG.md"}, numbered(CHANGELOG_MD)),
            ("apply_patch", {"patch": "--- a/CHANGELOG.md\n+++ b/CHANGELOG.md\n@@ -8,0 +9,8 @@\n"
                             "+## 1.5.0 — unreleased\n+\n+### Added\n+- `NewSlidingLimiter`: "
                             "sliding-window limiter (two-window approximation), `AllowN`.\n+\n"
                             "+### Fixed\n+- `window.Ring.Head` read the head slot without the "
                             "lock.\n+\n"},
             "M CHANGELOG.md\nPatch applied: 1 file changed, 8 insertions(+)"))
    b.answer("Added a 1.5.0 section with the new limiter under Added and the ring lock under "
             "Fixed.")

    b.user("no, I meant under Unreleased — we don't pick version numbers in PRs, the release "
           "script does that")
    b.tools(("apply_patch", {"patch": "--- a/CHANGELOG.md\n+++ b/CHANGELOG.md\n@@ -6,11 +6,9 @@\n"
                             " ## Unreleased\n \n-## 1.5.0 — unreleased\n-\n ### Added\n- - "
                             "`NewSlidingLimiter`: sliding-window limiter (two-window "
                             "approximation), `AllowN`.\n \n ### Fixed\n"},
             "M CHANGELOG.md\nPatch applied: 1 file changed, 0 insertions(+), 2 deletions(-)"),
            ("run", {"cmd": "sed -n 1,20p CHANGELOG.md"},
             "\n".join(("# Changelog\n\nAll notable changes to this project are documented here. "
                        "The format follows\nKeep a Changelog, and the project uses semantic "
                        "versioning.\n\n## Unreleased\n\n### Added\n- `NewSlidingLimiter`: "
                        "sliding-window limiter (two-window approximation), `AllowN`.\n\n### "
                        "Fixed\n- `window.Ring.Head` read the head slot without the lock.\n\n## "
                        "1.4.0 — 2024-04-02\n\n### Added\n- `httpx.ByRemoteIP` key function."
                        ).splitlines()[:20])))
    b.answer("Moved: both entries now sit under `## Unreleased`, no version number.")

    b.user("Ines already left a first round of comments on the draft, pasting them:\n\n"
           "> **window.go:60** `get()` takes the shard lock and returns the window; fine, but "
           "please add a comment that the window pointer stays valid after the shard lock is "
           "released (no eviction yet).\n>\n> **window.go:84** `Remaining` can go negative "
           "when the estimate is above the rate after a rotate; clamp at zero.\n>\n> "
           "**window_test.go** the rollover test spins 4 goroutines × 100 calls; use "
           "`t.Parallel()`-free setup and make the clock step deterministic, I had it flake "
           "once locally on the 10ms advance.\n>\n> nit: `DefaultShards` could be unexported, "
           "nobody outside needs it.\n\nAddress the first two and the nit, leave the test one "
           "for me to discuss.")
    clamp_old = ("\treturn Decision{\n\t\tAllowed:   true,\n\t\tRemaining: l.opts.Rate - "
                 "int64(count) - 1,\n")
    clamp_new = ("\tremaining := l.opts.Rate - int64(count) - 1\n\tif remaining < 0 {\n\t\t"
                 "remaining = 0\n\t}\n\treturn Decision{\n\t\tAllowed:   true,\n\t\tRemaining: "
                 "remaining,\n")
    b.tools(("read_file", {"path": "window.go", "start": 50, "end": 100},
             numbered(window_final, 50, 100)),
            ("apply_patch", {"patch": "--- a/window.go\n+++ b/window.go\n@@ -52,6 +52,8 @@\n "
                             "func (l *SlidingLimiter) get(key string, now time.Time) *window {\n"
                             "+\t// The returned window stays valid after the shard lock is "
                             "released:\n+\t// windows are never removed from a shard (no "
                             "eviction yet).\n \ts := l.shardFor(key)\n" + "".join(
                                 "-" + x + "\n" for x in clamp_old.splitlines()) + "".join(
                                 "+" + x + "\n" for x in clamp_new.splitlines())},
             "M window.go\nPatch applied: 1 file changed, 8 insertions(+), 1 deletion(-)"),
            ("run", {"cmd": "gofmt -l . ; go test -race -count=1 ./..."},
             "ok  \tgithub.com/orbitlabs/throttle\t1.604s\nok  \tgithub.com/orbitlabs/throttle/"
             "httpx\t0.402s\n?   \tgithub.com/orbitlabs/throttle/integration\t[no test files]\n"
             "ok  \tgithub.com/orbitlabs/throttle/internal/window\t0.531s"))
    b.answer("Done for the first two: a comment on `get()` about the window pointer's "
             "lifetime, and `Remaining` clamped at zero. On the nit I'd push back gently: the "
             "design notes name the shard constant as part of the layout and the README may "
             "want to mention it, so I left it exported — say if you want it unexported anyway. "
             "Race-enabled tests pass.")

    b.user("let's give the bucket AllowN too, same semantics, so callers can switch freely")
    bucket_allow_n = ("\n// AllowN takes n tokens for key at once, or none.\nfunc (b *BucketLimiter) "
                      "AllowN(ctx context.Context, key string, n int64) (Decision, error) {\n\tif "
                      "err := ctx.Err(); err != nil {\n\t\treturn Decision{}, err\n\t}\n\tnow := "
                      "b.opts.Clock.Now()\n\tb.mu.Lock()\n\tdefer b.mu.Unlock()\n\tbk := b.refill("
                      "key, now)\n\tif bk.tokens >= float64(n) {\n\t\tbk.tokens -= float64(n)\n"
                      "\t\treturn Decision{Allowed: true, Remaining: int64(bk.tokens), ResetAt: now."
                      "Add(b.fullIn(bk.tokens))}, nil\n\t}\n\twait := time.Duration((float64(n) - "
                      "bk.tokens) / b.perNanosecond())\n\treturn Decision{RetryAfter: wait, "
                      "ResetAt: now.Add(b.fullIn(bk.tokens))}, nil\n}\n")
    b.tools(("read_file", {"path": "bucket.go"}, numbered(BUCKET_GO)),
            ("apply_patch", {"patch": "--- a/bucket.go\n+++ b/bucket.go\n@@ -86,0 +87,21 @@\n"
                             + "".join("+" + x + "\n" for x in bucket_allow_n.splitlines())},
             "M bucket.go\nPatch applied: 1 file changed, 21 insertions(+)"),
            ("run", {"cmd": "go build ./..."},
             "# github.com/orbitlabs/throttle\n./bucket.go:96:11: b.refill undefined (type "
             "*BucketLimiter has no field or method refill)"))
    b.answer("It needs a small refactor first: `Allow` inlines the refill, so `AllowN` has "
             "nothing to call. I'll extract `refill(key, now) *bucket` from `Allow` and use it "
             "in both.")

    b.user("go on")
    refill = ("\n// refill returns key's bucket topped up to now. The caller holds b.mu.\nfunc "
              "(b *BucketLimiter) refill(key string, now time.Time) *bucket {\n\tbk, ok := b.bkts"
              "[key]\n\tif !ok {\n\t\tbk = &bucket{tokens: float64(b.opts.Burst), last: now}\n"
              "\t\tb.bkts[key] = bk\n\t}\n\tif elapsed := now.Sub(bk.last); elapsed > 0 {\n\t\t"
              "bk.tokens = math.Min(float64(b.opts.Burst), bk.tokens+float64(elapsed.Nanoseconds()"
              ")*b.perNanosecond())\n\t\tbk.last = now\n\t}\n\treturn bk\n}\n")
    b.tools(("apply_patch", {"patch": "--- a/bucket.go\n+++ b/bucket.go\n@@ -40,15 +40,7 @@\n"
                             " \tb.mu.Lock()\n \tdefer b.mu.Unlock()\n-\tbk, ok := b.bkts[key]\n-"
                             "\tif !ok {\n-\t\tbk = &bucket{tokens: float64(b.opts.Burst), last: "
                             "now}\n-\t\tb.bkts[key] = bk\n-\t}\n-\telapsed := now.Sub(bk.last)"
                             "\n-\tif elapsed > 0 {\n-\t\tbk.tokens = math.Min(float64(b.opts."
                             "Burst), bk.tokens+float64(elapsed.Nanoseconds())*b.perNanosecond())"
                             "\n-\t\tbk.last = now\n-\t}\n+\tbk := b.refill(key, now)\n \tif bk."
                             "tokens >= 1 {\n@@ -86,0 +79,15 @@\n" + "".join(
                                 "+" + x + "\n" for x in refill.splitlines())},
             "M bucket.go\nPatch applied: 1 file changed, 16 insertions(+), 11 deletions(-)"),
            ("run", {"cmd": "go build ./... && go test -race -count=1 -run Bucket -v ."},
             go_test_v(rng, [("TestBucketAllow", True), ("TestBucketAllow/within_burst", True),
                             ("TestBucketAllow/over_burst", True), ("TestBucketAllow/refills",
                                                                     True),
                             ("TestBucketAllow/partial_refill", True),
                             ("TestBucketRetryAfter", True),
                             ("TestBucketKeysAreIndependent", True)])),
            ("run", {"cmd": "git diff --stat"},
             " bucket.go | 38 ++++++++++++++++++++++++++++----------\n 1 file changed, 27 "
             "insertions(+), 11 deletions(-)"))
    b.answer("`refill()` extracted (documented as needing the lock), `Allow` uses it, and the "
             "bucket now has `AllowN` with the same all-or-nothing semantics. Bucket tests pass "
             "under -race.")

    b.user("run the whole suite verbose once, I want to see every test name for the PR "
           "checklist")
    all_tests = [("TestBucketAllow", True), ("TestBucketAllow/within_burst", True),
                 ("TestBucketAllow/over_burst", True), ("TestBucketAllow/refills", True),
                 ("TestBucketAllow/partial_refill", True), ("TestBucketRetryAfter", True),
                 ("TestBucketKeysAreIndependent", True), ("TestMiddlewarePassesThrough", True),
                 ("TestMiddlewareLimited", True), ("TestMiddlewareSkipsWithoutKey", True),
                 ("TestLimitedErrorMessage", True), ("TestOptionsNormalize", True),
                 ("TestOptionsNormalize/zero_period", True),
                 ("TestOptionsNormalize/zero_burst", True),
                 ("TestOptionsNormalize/negative_rate", True),
                 ("TestMemoryStoreSweep", True), ("TestMemoryStoreExpiry", True),
                 ("TestSlidingWindowAllow", True), ("TestSlidingWindowAllow/under_rate", True),
                 ("TestSlidingWindowAllow/over_rate", True),
                 ("TestSlidingWindowAllow/next_window_half_weight", True),
                 ("TestSlidingWindowAllow/two_windows_later", True),
                 ("TestSlidingWindowRollover", True), ("TestSlidingAllowN", True),
                 ("TestSlidingAllowN/all_or_nothing", True),
                 ("TestSlidingAllowN/exact_fit", True), ("TestBucketAllowN", True)]
    b.tools(("run", {"cmd": "go test -race -count=1 -v ./... 2>&1"},
             go_test_v(rng, all_tests) + "\n" + go_test_v(rng, [
                 ("TestHandler", True), ("TestHandler/allowed", True),
                 ("TestHandler/limited", True), ("TestHandler/no_key_skips", True),
                 ("TestHandler/limiter_down_fails_open", True), ("TestByRemoteIP", True),
                 ("TestHandlerWithSlidingLimiter", True)],
                 pkg="github.com/orbitlabs/throttle/httpx") + "\n?   \tgithub.com/orbitlabs/"
             "throttle/integration\t[no test files]\n" + go_test_v(rng, [
                 ("TestRingAdvance", True), ("TestRingAdvance/same_slot", True),
                 ("TestRingAdvance/next_slot", True), ("TestRingAdvance/wraps", True),
                 ("TestRingAdvance/gap_longer_than_ring", True), ("TestRingSum", True),
                 ("TestRingConcurrent", True)],
                 pkg="github.com/orbitlabs/throttle/internal/window")),
            ("run", {"cmd": "go vet ./... && gofmt -l ."}, ""))
    b.answer("Everything passes with -race: 27 tests/subtests in the root package (including "
             "the new sliding and AllowN ones), 7 in httpx, 7 in internal/window; vet and gofmt "
             "clean.")

    b.user("Ines said the rollover test flaked once for her. hammer it a bit and see if "
           "it reproduces")
    b.tools(("run", {"cmd": "go test -race -count=40 -run 'TestSlidingWindowRollover$' -v . "
                     "2>&1 | tail -n 82"},
             "\n".join(f"=== RUN   TestSlidingWindowRollover\n--- PASS: TestSlidingWindowRollover "
                       f"({rng.uniform(0.01, 0.09):.2f}s)" for _ in range(40))
             + f"\nPASS\nok  \tgithub.com/orbitlabs/throttle\t{rng.uniform(2, 4):.3f}s"),
            ("run", {"cmd": "stress -p 2 -timeout 60s ./throttle.test -test.run "
                     "'TestSlidingWindowRollover$' -test.count=1"},
             "\n".join(f"{5 * (i + 1)}s: {rng.randrange(180, 260) * (i + 1)} runs so far, 0 "
                       f"failures" for i in range(12))))
    b.answer("No reproduction: 40 runs under -race and ~2,700 runs under `stress` for a "
             "minute, all green. The flake she saw was probably with the pre-fix code (the "
             "overshoot we fixed). I'll mention the numbers in the PR so she can judge.")

    b.user("add a runnable example for godoc while we're at it")
    example = ("package throttle_test\n\nimport (\n\t\"context\"\n\t\"fmt\"\n\t\"time\"\n\n"
               "\t\"github.com/orbitlabs/throttle\"\n)\n\n// A limit of three calls in any "
               "rolling second.\nfunc ExampleNewSlidingLimiter() {\n\tl, err := throttle."
               "NewSlidingLimiter(throttle.Options{Rate: 3, Period: time.Second})\n\tif err != "
               "nil {\n\t\tpanic(err)\n\t}\n\tdefer l.Close()\n\tctx := context.Background()\n"
               "\tfor i := 0; i < 4; i++ {\n\t\td, _ := l.Allow(ctx, \"user:42\")\n\t\tfmt."
               "Println(i, d.Allowed)\n\t}\n\t// Output:\n\t// 0 true\n\t// 1 true\n\t// 2 "
               "true\n\t// 3 false\n}\n\n// Taking several permits at once, as a batch sender "
               "would.\nfunc ExampleSlidingLimiter_AllowN() {\n\tl, _ := throttle."
               "NewSlidingLimiter(throttle.Options{Rate: 50, Period: time.Second})\n\tctx := "
               "context.Background()\n\tfirst, _ := l.AllowN(ctx, \"hooks\", 40)\n\tsecond, _ "
               ":= l.AllowN(ctx, \"hooks\", 20)\n\tfmt.Println(first.Allowed, second.Allowed)\n"
               "\t// Output: true false\n}\n")
    b.tools(("apply_patch", {"patch": diff("example_sliding_test.go", "", example)},
             "A example_sliding_test.go\nPatch applied: 1 file changed, "
             f"{len(example.splitlines())} insertions(+)"),
            ("run", {"cmd": "go test -count=1 -run Example -v ."},
             go_test_v(rng, [("ExampleNewSlidingLimiter", True),
                             ("ExampleSlidingLimiter_AllowN", True)])))
    b.answer("Two examples (`ExampleNewSlidingLimiter`, `ExampleSlidingLimiter_AllowN`) with "
             "checked output; both pass, and godoc will show them under the constructor and "
             "the method.")

    b.user("give me the full diff against main so I can skim it before pushing")
    b.tools(("run", {"cmd": "git diff main --stat"},
             " CHANGELOG.md                                 |   8 +\n README.md          "
             "                          |  19 +\n bucket.go                                    "
             "|  38 ++-\n httpx/middleware_test.go                     |  21 +\n integration/"
             "store_redis_integration_test.go |   7 +-\n internal/window/ring.go           "
             "           |   2 +\n window.go                                    | 144 +++++++++\n"
             " window_test.go                               | 101 ++++++\n 8 files changed, 325 "
             "insertions(+), 15 deletions(-)"),
            ("run", {"cmd": "git diff main -- window.go window_test.go"},
             diff("window.go", "", window_final) + diff("window_test.go", "", test_v2)),
            ("run", {"cmd": "git diff main -- httpx/ bucket.go"},
             diff("httpx/middleware_test.go", MIDDLEWARE_TEST_GO, MIDDLEWARE_TEST_GO + e2e)
             + diff("bucket.go", BUCKET_GO, BUCKET_GO.replace(
                 "\tbk, ok := b.bkts[key]\n\tif !ok {\n\t\tbk = &bucket{tokens: float64(b.opts."
                 "Burst), last: now}\n\t\tb.bkts[key] = bk\n\t}\n\telapsed := now.Sub(bk.last)\n"
                 "\tif elapsed > 0 {\n\t\tbk.tokens = math.Min(float64(b.opts.Burst), bk.tokens+"
                 "float64(elapsed.Nanoseconds())*b.perNanosecond())\n\t\tbk.last = now\n\t}\n",
                 "\tbk := b.refill(key, now)\n") + refill + bucket_allow_n)))
    b.answer("The diff is 325 lines over 8 files; the bulk is window.go and its tests, shown "
             "above in full. Nothing unexpected in it — no debug leftovers, no unrelated "
             "formatting changes.")

    # 28 -- final CI
    b.user("pushed again, CI?")
    b.tools(("run", {"cmd": "gh run list --branch feat/sliding-window-v2 --limit 1"},
             "STATUS  TITLE                                          WORKFLOW  BRANCH       "
             "           EVENT  ID          ELAPSED  AGE\n✓       docs: sliding window section "
             "in README          ci        feat/sliding-window-v2  push   9034877311  2m02s    "
             "1m"),
            ("run", {"cmd": "gh run view 9034877311 --log | grep -E '^.{25}(ok|FAIL|---)' "},
             ci_log(rng, 9034877311, ok=True)))
    b.answer("Green: unit, race and integration jobs all pass on the rebased branch.")

    b.user("cool")
    b.answer("🙂")

    # 30 -- the final question needs every fact
    b.final("Write the pull request description now, ready to paste, for the reviewer. It must "
            "cover: the title with the ticket; the branch; the Go toolchain CI uses (and that "
            "go.mod stays as is); the constructor name we settled on; the design choices from "
            "the notes I pasted (shard count and the Redis key prefix); the batch method's "
            "signature; the test that failed and what it reported, where the race detector "
            "pointed and what the cause was; the benchmark figure; which environment variable the Redis store and "
            "the integration tests read; and the linter's line limit after the rebase. Address "
            "it to the reviewer by name.")
    return b.finish("B: coding agent, Go library feature", "coding", FACTS)
