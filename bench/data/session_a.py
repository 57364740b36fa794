"""Session A: an operations assistant helps move the billing-sync service to a new cluster.

~88 Q&A cycles over one working day: shell, kubectl, log and metrics tool calls with realistic
output (tables, JSON, logs, YAML, code), code answers, chit-chat, and 18 planted facts that the
final question ("write the handover") needs — see ``FACTS``.
"""

from __future__ import annotations

import json

from bench.data.common import (
    Builder,
    Fact,
    FixtureSession,
    log_lines,
    pods,
    prom_series,
    psql_table,
)

SYSTEM = (
    "You are Relay, an operations assistant for the payments platform team. You can run shell "
    "commands on hosts the user names (tool `shell`), query Kubernetes (`kubectl`), search logs "
    "(`logs`), read files from the infra repository (`read_file`) and query Prometheus "
    "(`promql`). Prefer reading state over guessing. Keep answers short unless asked for "
    "detail; show commands you would run before running anything that changes state. Never "
    "print secrets in full."
)

FACTS = [
    Fact("staging_host", "stg-ams-04.internal", "the host used as staging", "user"),
    Fact("status_recipient", "Priya Raman", "who receives status updates and signs off", "user"),
    Fact("db_pool", "pool_size: 64", "the ledger database pool size in the service config",
         "tool", stale=("pool_size: 48",)),
    Fact("skew", "4.2 s ahead", "the clock skew diagnosis on the worker node", "assistant"),
    Fact("dlq", "billing-dlq-eu2", "the dead-letter queue rejected messages go to", "tool"),
    Fact("cutover_date", "April 2", "the cutover date", "user", stale=("March 28",)),
    Fact("compat_flag", "--ledger-compat", "the worker's compatibility flag", "tool",
         stale=("--legacy-ledger",)),
    Fact("psycopg_pin", "3.1.18", "the psycopg version to stay on", "user"),
    Fact("rate_limit", "1375", "the gateway's per-tenant request limit (rps)", "tool"),
    Fact("exporter_port", "9465", "the metrics exporter's port", "assistant"),
    Fact("budget", "€1,900", "the monthly cost cap of the new cluster", "user"),
    Fact("signing_key", "kid-5521-b", "the ledger signing key id", "tool"),
    Fact("window", "02:00-04:00 CET", "the maintenance window (Sunday)", "user"),
    Fact("repl_slot", "billing_sync_slot", "the logical replication slot that lags", "tool"),
    Fact("backfill_batch", "25,000 rows", "the backfill batch size", "assistant"),
    Fact("oncall", "Tomasz Nowak", "who has the pager tonight", "user"),
    Fact("good_sha", "9f3c2ab41e", "the last known-good release commit", "tool"),
    Fact("channel", "#billing-cutover", "the channel for cutover chatter", "user"),
]

CHITCHAT = [
    ("thanks", "You're welcome."),
    ("nice", "Glad that helped."),
    ("ok", "Okay."),
    ("cool, thanks!", "Any time."),
    ("perfect", "👍"),
    ("ha, of course it was DNS", "It usually is. Want me to keep going with the next check?"),
    ("ok give me a sec, getting coffee", "Sure, I'll be here."),
    ("back", "Welcome back. We were in the middle of the replication checks."),
    ("makes sense", "Good. Shout when you want the next step."),
    ("great, that was quick", "It was a small query. Next?"),
    ("lol", "🙂"),
    ("hmm ok", "If something looks off to you, tell me what and I'll dig in."),
    ("yep", "Noted."),
    ("sounds good", "Okay, moving on."),
    ("brb, standup", "Sure."),
    ("thx", "No problem."),
    ("right", "Mm-hm."),
    ("ok cool", "Cool."),
    ("👍", "👍"),
    ("appreciate it", "Happy to help."),
]


def build() -> FixtureSession:
    b = Builder("quality-a", seed=20260314, system=SYSTEM)
    rng = b.rng
    chit = iter(CHITCHAT)

    def chat() -> None:
        q, a = next(chit)
        b.user(q)
        b.answer(a)

    # 1 -- staging host (user, first cycle)
    b.user("Morning. Before anything else: our staging box is stg-ams-04.internal — the wiki "
           "still lists the old one, ignore it. Can you check it's up?")
    b.tool("shell", {"host": "stg-ams-04.internal", "cmd": "uptime && df -h /srv"},
           " 08:12:44 up 41 days,  3:07,  2 users,  load average: 0.41, 0.38, 0.35\n"
           "Filesystem      Size  Used Avail Use% Mounted on\n"
           "/dev/nvme1n1p1  492G  301G  166G  65% /srv")
    b.answer("It's up: 41 days of uptime, load around 0.4, and /srv is 65 % full (166 GB free). "
             "I'll use that host for anything staging from now on.")

    # 2 -- who gets updates (user)
    b.user("Quick one on comms: status updates for this migration go to Priya Raman, she's "
           "the one signing off on it. Keep them short, she reads them on her phone.")
    b.answer("Got it — short updates to Priya Raman, who signs off. I'll draft them as three or "
             "four bullet lines when we reach a milestone.")

    # 3
    b.user("What's running in the billing namespace on the old cluster right now?")
    b.tool("kubectl", {"context": "kw-prod", "args": "get pods -n billing -o wide"},
           pods(rng, "billing-sync", 3) + "\n" + "\n".join(pods(rng, "ledger-api", 4).split("\n")[1:])
           + "\n" + "\n".join(pods(rng, "gateway", 2).split("\n")[1:]))
    b.answer("Nine pods, all Running: 3 × billing-sync, 4 × ledger-api, 2 × gateway, spread over "
             "the kw-node pool. No restarts in the last day.")
    chat()

    # 5
    b.user("Show me the last few minutes of billing-sync logs, anything odd?")
    b.tool("logs", {"service": "billing-sync", "since": "10m", "cluster": "kw-prod"},
           log_lines(rng, "billing-sync", 22))
    b.answer("Looks routine: batches commit every few seconds, the checkpoint advances, and "
             "there are a couple of slow-commit warnings just under a second. Nothing that "
             "explains the lag you mentioned yesterday yet.")

    # 6
    b.user("and the gateway p95 over the last hour?")
    b.tool("promql", {"query": "histogram_quantile(0.95, sum(rate(http_request_duration_seconds"
                               "_bucket{service=\"gateway\"}[5m])) by (le))", "range": "1h",
                      "step": "5m"},
           prom_series(rng, "gateway_p95_seconds", {"service": "gateway"}, 12, 0.08, 0.19))
    b.answer("p95 sits between roughly 80 and 190 ms over the hour, no spikes. The gateway "
             "isn't where the time goes.")
    chat()

    # 8
    b.user("Can you pull up the helm values we use for billing-sync in prod?")
    b.tool("read_file", {"repo": "infra", "path": "charts/billing-sync/values-prod.yaml"},
           "image:\n  repository: registry.corp.lan/payments/billing-sync\n  tag: 2.7.4\n"
           "replicaCount: 3\nresources:\n  requests:\n    cpu: 500m\n    memory: 768Mi\n"
           "  limits:\n    memory: 1536Mi\nenv:\n  LOG_LEVEL: info\n  SYNC_INTERVAL: 5s\n"
           "  UPSTREAM_URL: https://upstream-billing.corp.lan/api\n"
           "podDisruptionBudget:\n  minAvailable: 2\nnodeSelector:\n  pool: general\n"
           "tolerations: []\n")
    b.answer("Prod runs billing-sync 2.7.4 with 3 replicas, 500m CPU / 768Mi requested and a "
             "1.5Gi memory limit, 5 s sync interval, and a PDB keeping at least 2 pods up.")

    # 9 -- pool size, first value (tool)
    b.user("And the database side of its config? I want to know how many connections it opens.")
    b.tool("read_file", {"repo": "infra", "path": "services/billing-sync/config/db.yaml"},
           "ledger:\n  host: pg-ledger-primary.corp.lan\n  port: 5432\n  database: ledger\n"
           "  user: billing_sync\n  pool_size: 48\n  pool_timeout: 30s\n  statement_timeout: 15s\n"
           "  sslmode: verify-full\nreplica:\n  host: pg-ledger-replica.corp.lan\n"
           "  pool_size: 16\n  lag_tolerance: 10s\n")
    b.answer("Each pod opens up to 48 connections to the primary (30 s pool timeout, 15 s "
             "statement timeout) and 16 to the replica. With 3 replicas that's 144 on the "
             "primary at most.")

    # 10
    b.user("is the replica keeping up?")
    b.tool("shell", {"host": "pg-ledger-replica.corp.lan", "cmd": "psql -Atc \"select "
                     "now() - pg_last_xact_replay_timestamp()\""},
           "00:00:00.412883")
    b.answer("Yes, replay lag is about 0.4 s.")
    chat()

    # 12
    b.user("Let's look at the sync lag metric for the last 6 hours, that's what's been bugging "
           "me.")
    b.tool("promql", {"query": "max(billing_sync_lag_seconds)", "range": "6h", "step": "20m"},
           prom_series(rng, "billing_sync_lag_seconds", {"job": "billing-sync"}, 18, 0.5, 7.5))
    b.answer("The lag wanders between half a second and ~7 s, and the peaks don't line up with "
             "traffic. That pattern usually points at ordering (timestamps) rather than load. "
             "Worth checking the node clocks.")

    # 13
    b.user("go ahead, check the clocks on the workers")
    b.tool("shell", {"hosts": "kw-node-[05:08]", "cmd": "chronyc tracking | egrep 'Reference|System time'"},
           "kw-node-05: Reference ID    : 0A280311 (ntp-a.corp.lan)\n"
           "kw-node-05: System time     : 0.000021190 seconds slow of NTP time\n"
           "kw-node-06: Reference ID    : 0A280311 (ntp-a.corp.lan)\n"
           "kw-node-06: System time     : 0.000008412 seconds fast of NTP time\n"
           "kw-node-07: Reference ID    : 7F7F0101 ()\n"
           "kw-node-07: System time     : 4.213557 seconds fast of NTP time\n"
           "kw-node-08: Reference ID    : 0A280311 (ntp-a.corp.lan)\n"
           "kw-node-08: System time     : 0.000013007 seconds slow of NTP time")
    b.answer("Three nodes are within microseconds of ntp-a. kw-node-07 has no reference at all "
             "and is over four seconds fast.")

    # 14 -- diagnosis (assistant)
    b.user("so what's the story there?")
    b.tool("shell", {"host": "kw-node-07", "cmd": "grep -E '^(server|pool)' /etc/chrony/chrony.conf"
                                                 " && journalctl -u chrony --since -7d | tail -3"},
           "server ntp-old.corp.lan iburst\n"
           "Mar 10 03:14:07 kw-node-07 chronyd[812]: Can't synchronise: no selectable sources\n"
           "Mar 10 03:14:07 kw-node-07 chronyd[812]: Source 10.40.9.2 offline\n"
           "Mar 12 11:02:55 kw-node-07 chronyd[812]: System clock wrong by 3.017 seconds")
    b.answer("Diagnosis: kw-node-07's clock is 4.2 s ahead. Its chrony config still points only "
             "at ntp-old, which was switched off on Tuesday, so the node has been free-running "
             "since then. The billing-sync pod on that node stamps checkpoints in the future, "
             "which is why the lag graph jumps. Fix: point it at ntp-a/ntp-b like the others and "
             "let chrony step the clock, then restart that pod.")
    chat()

    # 16
    b.user("write me the chrony snippet so I can put it in the node config repo")
    b.answer("```conf\n# /etc/chrony/chrony.conf (kw-node pool)\npool ntp-a.corp.lan iburst "
             "maxsources 2\nserver ntp-b.corp.lan iburst\nmakestep 1.0 3\nrtcsync\n"
             "driftfile /var/lib/chrony/chrony.drift\nleapsectz right/UTC\n```\n`makestep 1.0 3` "
             "lets chrony step the clock during the first three updates instead of slewing "
             "for hours.")

    # 17
    b.user("done, pushed it. can you verify on 07?")
    b.tool("shell", {"host": "kw-node-07", "cmd": "chronyc tracking | egrep 'Reference|System time'"},
           "Reference ID    : 0A280311 (ntp-a.corp.lan)\n"
           "System time     : 0.000310554 seconds slow of NTP time")
    b.answer("kw-node-07 now follows ntp-a and is 0.3 ms off. The lag graph should flatten once "
             "the pod there restarts.")

    # 18 -- dead-letter queue (tool, log line with keyword)
    b.user("while we're at it, some invoices never showed up in the ledger last night. any "
           "trace?")
    b.tool("logs", {"service": "billing-sync", "since": "18h", "grep": "reject|retry|dlq"},
           log_lines(rng, "billing-sync", 6, day=13, extra=[
               "WARN  billing-sync retry invoice=inv_7c1e02aa19 attempt=4 reason=upstream_timeout",
               "ERROR billing-sync giving up invoice=inv_7c1e02aa19 after 5 attempts; moved to "
               "billing-dlq-eu2",
               "ERROR billing-sync giving up invoice=inv_0b93f1d2c4 after 5 attempts; moved to "
               "billing-dlq-eu2",
           ]))
    b.answer("Two invoices (inv_7c1e02aa19 and inv_0b93f1d2c4) hit upstream timeouts five times "
             "and were parked in the dead-letter queue. They can be replayed once upstream is "
             "healthy.")

    # 19
    b.user("how many are sitting in there in total?")
    b.tool("shell", {"host": "mq-admin.corp.lan", "cmd": "rabbitmqctl list_queues name messages "
                     "consumers | grep -i dlq"},
           "billing-dlq-eu2\t37\t0\nledger-dlq-eu2\t0\t0\nnotify-dlq-eu2\t4\t0")
    b.answer("37 messages in the billing one, none being consumed. The ledger queue is empty and "
             "notifications have 4.")

    # 20 -- cutover date, first value (user)
    b.user("Right. Timeline: cutover to the new cluster is set for March 28, the Saturday. "
           "Everything we do today is prep for that.")
    b.answer("Understood: cutover on Saturday, March 28. I'll frame today's work as the prep "
             "list for that date.")

    # 21
    b.user("What does the new cluster look like? it's called ams-k8s-2")
    b.tool("kubectl", {"context": "ams-k8s-2", "args": "get nodes -o wide"},
           "NAME          STATUS   ROLES           AGE   VERSION   INTERNAL-IP    OS-IMAGE\n"
           + "\n".join(f"ams2-w{i:02d}     Ready    worker          9d    v1.29.6   10.64.1.{10 + i}"
                       f"     Debian GNU/Linux 12 (bookworm)" for i in range(1, 7))
           + "\nams2-cp01     Ready    control-plane   9d    v1.29.6   10.64.0.5      Debian "
             "GNU/Linux 12 (bookworm)")
    b.answer("Seven nodes, all Ready: one control plane and six workers (ams2-w01 … w06), "
             "Kubernetes 1.29.6 on Debian 12. The old cluster is on 1.27, so check for removed "
             "API versions in the charts.")

    # 22
    b.user("good point, can you grep the charts for old apis?")
    b.tool("shell", {"host": "localhost", "cmd": "cd infra && grep -rn 'apiVersion:' charts/ | "
                     "grep -v 'apps/v1\\|v1$' | head"},
           "charts/billing-sync/templates/pdb.yaml:1:apiVersion: policy/v1\n"
           "charts/billing-sync/templates/hpa.yaml:1:apiVersion: autoscaling/v2\n"
           "charts/ledger-api/templates/cronjob.yaml:1:apiVersion: batch/v1\n"
           "charts/gateway/templates/ingress.yaml:1:apiVersion: networking.k8s.io/v1")
    b.answer("All current: policy/v1, autoscaling/v2, batch/v1 and networking.k8s.io/v1. "
             "Nothing removed between 1.27 and 1.29 is in use.")
    chat()

    # 24 -- compat flag, first name (tool)
    b.user("The new image needs some flag to talk to the old ledger schema, right? what's it "
           "called again")
    b.tool("shell", {"host": "localhost", "cmd": "docker run --rm registry.corp.lan/payments/"
                     "billing-sync:2.7.4 --help"},
           "usage: billing-sync [options]\n\n  --config PATH         config file (default "
           "/etc/billing-sync/config.yaml)\n  --once                run one sync pass and exit\n"
           "  --dry-run             read upstream, write nothing\n  --legacy-ledger       "
           "write rows in the v1 ledger layout (pre-2024 schema)\n  --metrics-addr ADDR   "
           "listen address for /metrics (default :9100)\n  --log-format FMT      text|json "
           "(default text)\n  -v, --verbose         more logs")
    b.answer("It's `--legacy-ledger`: writes rows in the v1 ledger layout. We'll start the "
             "worker on the new cluster with that until the schema migration lands.")

    # 25
    b.user("can you show me how the worker loop handles that flag? curious")
    b.tool("read_file", {"repo": "billing-sync", "path": "billing_sync/worker.py", "lines": "40-88"},
           "    def run_once(self) -> int:\n        page = self.upstream.fetch(self.cursor, "
           "limit=self.cfg.page_size)\n        rows = [self.mapper(inv) for inv in page.items]\n"
           "        if self.cfg.v1_layout:\n            rows = [to_v1(r) for r in rows]\n"
           "        with self.db.transaction() as tx:\n            tx.copy_rows(\"ledger_entries\", "
           "rows)\n            tx.set_checkpoint(page.next_cursor, now_utc())\n"
           "        self.cursor = page.next_cursor\n        self.metrics.rows.inc(len(rows))\n"
           "        return len(rows)\n\n    def run(self) -> None:\n        while not "
           "self.stopping.is_set():\n            try:\n                n = self.run_once()\n"
           "            except UpstreamTimeout as exc:\n                self.retry.note(exc)\n"
           "                n = 0\n            if n == 0:\n                self.stopping.wait("
           "self.cfg.sync_interval)\n")
    b.answer("The flag only changes the mapping step: with v1 layout on, every mapped row goes "
             "through `to_v1()` before the COPY. The checkpoint is written in the same "
             "transaction using the node's clock (`now_utc()`), which is exactly why the skewed "
             "node produced future checkpoints.")

    # 26
    b.user("ok so the new cluster doesn't have that clock problem?")
    b.tool("shell", {"hosts": "ams2-w[01:06]", "cmd": "chronyc tracking | grep 'System time'"},
           "\n".join(f"ams2-w{i:02d}: System time     : 0.0000{rng.randrange(10, 99)}{rng.randrange(100, 999)}"
                     f" seconds {'fast' if rng.random() < 0.5 else 'slow'} of NTP time"
                     for i in range(1, 7)))
    b.answer("All six workers are within a tenth of a millisecond. No.")

    # 27 -- psycopg pin (user)
    b.user("One rule for the image build: keep psycopg pinned at 3.1.18, nobody bumps it — the "
           "3.2 line broke our COPY path last time and it took a day to notice.")
    b.answer("Understood, psycopg stays at 3.1.18. I'll check the lock file before we build.")

    # 28
    b.user("check it now actually")
    b.tool("shell", {"host": "localhost", "cmd": "cd billing-sync && grep -A2 'name = \"psycopg' "
                     "poetry.lock"},
           "name = \"psycopg\"\nversion = \"3.1.18\"\ndescription = \"PostgreSQL database "
           "adapter for Python\"\n--\nname = \"psycopg-binary\"\nversion = \"3.1.18\"\n"
           "description = \"PostgreSQL database adapter for Python -- C optimisation distribution\"")
    b.answer("Both psycopg and psycopg-binary are locked at that version. Good.")
    chat()

    # 30
    b.user("what's the gateway doing in terms of per-tenant limits? we don't want the new "
           "cluster to start throttling people")
    b.tool("logs", {"service": "gateway", "since": "5m"}, log_lines(rng, "gateway", 14))
    b.answer("The access log doesn't show limits directly; I'll ask the gateway's admin API.")

    # 31 -- rate limit (tool JSON, with keyword)
    b.user("yes do that")
    b.tool("shell", {"host": "gw-admin.corp.lan", "cmd": "curl -s localhost:8081/admin/limits/"
                     "default | jq ."},
           json.dumps({"status": "success", "data": {"policy": "per-tenant", "algorithm":
                       "token-bucket", "rate_limit_rps": 1375, "burst": 2750,
                       "applies_to": ["/v1/invoices", "/v1/ledger/entries"], "updated_by":
                       "config-sync", "updated_at": "2026-02-27T16:40:11Z"}}, indent=2))
    b.answer("Default per-tenant limit is a token bucket of 1375 requests per second with a "
             "burst of twice that, on the invoice and ledger endpoints. We'll carry the same "
             "policy over.")

    # 32
    b.user("and how close do tenants get to it?")
    b.tool("promql", {"query": "topk(5, max_over_time(sum by (tenant)(rate(gateway_requests_"
                               "total[1m]))[24h:1m]))"},
           json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
               {"metric": {"tenant": t}, "value": [1773561600, f"{v:.1f}"]}
               for t, v in [("acme-retail", 612.4), ("northwind", 488.0), ("globex", 301.7),
                            ("initech", 122.9), ("umbrella-eu", 97.3)]]}}, indent=1))
    b.answer("The busiest tenant (acme-retail) peaked around 612 rps in the last day, under half "
             "the limit. Plenty of headroom.")
    chat()

    # 34
    b.user("Let's start writing the deployment for the new cluster. Give me a kustomize "
           "overlay for billing-sync.")
    b.answer("```yaml\n# overlays/ams-k8s-2/kustomization.yaml\napiVersion: kustomize.config."
             "k8s.io/v1beta1\nkind: Kustomization\nnamespace: billing\nresources:\n  - ../../base\n"
             "images:\n  - name: registry.corp.lan/payments/billing-sync\n    newTag: 2.7.4\n"
             "patches:\n  - path: replicas.yaml\n  - path: args.yaml\n```\n\n```yaml\n# "
             "overlays/ams-k8s-2/args.yaml\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n"
             "  name: billing-sync\nspec:\n  template:\n    spec:\n      containers:\n"
             "        - name: billing-sync\n          args: [\"--config\", \"/etc/billing-sync/"
             "config.yaml\", \"--log-format\", \"json\"]\n```\nThe compat flag still needs to "
             "go into args; I left it out until we confirm its name on the new image.")

    # 35
    b.user("fine. and metrics? the old setup scraped 9100 but on ams2 node-exporter sits on 9100 "
           "already i think")
    b.tool("kubectl", {"context": "ams-k8s-2", "args": "get svc -A -o custom-columns=NS:.metadata"
                       ".namespace,NAME:.metadata.name,PORTS:.spec.ports[*].port | grep -E "
                       "'9100|91[0-9][0-9]|94[0-9][0-9]'"},
           "monitoring   node-exporter            9100\nmonitoring   kube-state-metrics       "
           "8080,8081\nmonitoring   blackbox-exporter        9115\nlogging      fluent-bit     "
           "          2020")
    b.answer("Right, node-exporter has 9100 on ams2 (hostNetwork), so the worker can't keep its "
             "default there.")

    # 36 -- exporter port (assistant decision)
    b.user("pick something then")
    b.answer("I'll put the billing-sync metrics exporter on port 9465: it's free on every ams2 "
             "node, outside the ranges the monitoring stack uses, and close to the other "
             "app exporters. Args gain `--metrics-addr :9465` and the ServiceMonitor targets "
             "that port.")

    # 37
    b.user("write the ServiceMonitor")
    b.answer("```yaml\napiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata:\n"
             "  name: billing-sync\n  namespace: billing\n  labels:\n    release: kube-prom\n"
             "spec:\n  selector:\n    matchLabels:\n      app: billing-sync\n  endpoints:\n"
             "    - port: metrics\n      interval: 30s\n      scrapeTimeout: 10s\n```\nThe "
             "Service needs a port named `metrics` pointing at the exporter port above.")
    chat()

    # 39
    b.user("how much is ams2 costing us so far this month?")
    b.tool("shell", {"host": "localhost", "cmd": "costctl report --cluster ams-k8s-2 --month "
                     "2026-03 --format table"},
           "RESOURCE            UNITS        COST (EUR)\ncompute (7 nodes)   2212 h       "
           "612.40\nblock storage       1.8 TB-mo    88.10\nload balancer       1            "
           "21.60\negress              310 GB       17.05\n----------------------------------"
           "------\nTOTAL (14 days)                  739.15\nPROJECTED (31 days)             "
           "1636.70")
    b.answer("€739 so far for 14 days; the projection for the full month is about €1,637, "
             "mostly compute.")

    # 40 -- budget cap (user)
    b.user("Keep in mind finance capped the new cluster at €1,900 a month, hard limit, they were "
           "very firm about it. So whatever we add has to fit under that.")
    b.answer("Noted: a hard cap of €1,900 a month. The projection leaves about €263 of room, "
             "which is roughly one more worker node. I'll flag anything that would eat into it.")

    # 41
    b.user("do we need another worker for billing-sync?")
    b.tool("kubectl", {"context": "ams-k8s-2", "args": "top nodes"},
           "NAME        CPU(cores)   CPU%   MEMORY(bytes)   MEMORY%\n"
           + "\n".join(f"ams2-w{i:02d}    {rng.randrange(300, 1900)}m        "
                       f"{rng.randrange(8, 48)}%    {rng.randrange(3000, 9000)}Mi          "
                       f"{rng.randrange(20, 61)}%" for i in range(1, 7)))
    b.answer("No. The workers are well under half their CPU and at most ~60 % memory; "
             "billing-sync's three pods (1.5 CPU, ~2.3 GiB requested in total) fit comfortably.")

    # 42
    b.user("cool. next, secrets. what does billing-sync read from env on the old cluster?")
    b.tool("kubectl", {"context": "kw-prod", "args": "get deploy billing-sync -n billing -o "
                       "jsonpath='{.spec.template.spec.containers[0].env[*].name}'"},
           "LOG_LEVEL SYNC_INTERVAL UPSTREAM_URL UPSTREAM_TOKEN LEDGER_DSN LEDGER_SIGNING_KEY_ID "
           "LEDGER_SIGNING_KEY SENTRY_DSN")
    b.answer("Eight variables; four are secret-backed: UPSTREAM_TOKEN, LEDGER_DSN, "
             "LEDGER_SIGNING_KEY and SENTRY_DSN. The signing key id is plain config.")
    chat()

    # 44 -- signing key id (tool)
    b.user("what's the signing key id set to? we need the same one on ams2 or the ledger "
           "rejects the rows")
    b.tool("kubectl", {"context": "kw-prod", "args": "get configmap billing-sync-env -n billing "
                       "-o yaml"},
           "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: billing-sync-env\n  namespace: "
           "billing\n  resourceVersion: \"88213377\"\ndata:\n  LOG_LEVEL: info\n  SYNC_INTERVAL: "
           "5s\n  UPSTREAM_URL: https://upstream-billing.corp.lan/api\n  LEDGER_SIGNING_KEY_ID: "
           "kid-5521-b\n")
    b.answer("The key id on the old cluster is in the ConfigMap above; the new cluster's "
             "ConfigMap has to carry the same value, and the key itself comes from Vault.")

    # 45
    b.user("copy the configmap over to ams2 for me (dry run first)")
    b.tool("kubectl", {"context": "ams-k8s-2", "args": "apply -n billing --dry-run=server -f "
                       "billing-sync-env.yaml"},
           "configmap/billing-sync-env created (server dry run)")
    b.answer("The server-side dry run passes. Say the word and I'll apply it for real.")

    # 46
    b.user("go")
    b.tool("kubectl", {"context": "ams-k8s-2", "args": "apply -n billing -f billing-sync-env.yaml"},
           "configmap/billing-sync-env created")
    b.answer("Applied on ams2.")
    chat()

    # 48 -- maintenance window (user, with keyword)
    b.user("For the record, the change board gave us the maintenance window Sunday "
           "02:00-04:00 CET. Anything outside it needs a separate approval, so the actual "
           "switch has to happen inside those two hours.")
    b.answer("Noted. The DNS switch and the worker scale-down will sit inside that Sunday "
             "window; prep can happen before it.")

    # 49
    b.user("how long does a full sync pass take on staging? trying to see if two hours is "
           "enough")
    b.tool("shell", {"host": "stg-ams-04.internal", "cmd": "time billing-sync --once --config "
                     "/etc/billing-sync/staging.yaml 2>&1 | tail -4"},
           log_lines(rng, "billing-sync", 3, day=14) + "\n\nreal\t11m42.118s\nuser\t3m10.004s\n"
           "sys\t0m21.551s")
    b.answer("About 11 m 42 s for a full pass on staging, which has roughly a third of prod's "
             "volume. Scaled up that's ~35 minutes, so two hours leaves room for a rollback.")

    # 50
    b.user("and the replication between old and new databases, where are we?")
    b.tool("shell", {"host": "pg-ledger-primary.corp.lan", "cmd": "psql -c \"select slot_name, "
                     "plugin, active, pg_size_pretty(pg_wal_lsn_diff(pg_current_wal_lsn(), "
                     "confirmed_flush_lsn)) as behind from pg_replication_slots\""},
           psql_table(rng, ["slot_name", "plugin", "active", "behind"],
                      [["billing_sync_slot", "pgoutput", "t", "1912 MB"],
                       ["ledger_cdc", "pgoutput", "t", "312 kB"],
                       ["ams2_ledger_sub", "pgoutput", "t", "48 MB"]]))
    b.answer("The new-cluster subscription (ams2_ledger_sub) is 48 MB behind, fine. But one "
             "slot is almost 2 GB behind — that's WAL the primary has to keep.")
    chat()

    # 52 -- replication slot (tool log line with keyword)
    b.user("is that slot a problem?")
    b.tool("logs", {"service": "postgres", "host": "pg-ledger-primary.corp.lan", "since": "2h"},
           "2026-03-14T10:02:11.204Z LOG:  checkpoint starting: time\n"
           "2026-03-14T10:04:41.877Z LOG:  checkpoint complete: wrote 18890 buffers (11.5%)\n"
           "2026-03-14T10:05:00.010Z WARNING:  replication slot \"billing_sync_slot\" is "
           "1.9 GB behind; WAL retained\n"
           "2026-03-14T10:35:00.009Z WARNING:  replication slot \"billing_sync_slot\" is "
           "2.0 GB behind; WAL retained\n"
           "2026-03-14T10:36:12.551Z LOG:  automatic vacuum of table \"ledger.public.ledger_"
           "entries\": index scans: 1\n2026-03-14T11:05:00.012Z WARNING:  replication slot "
           "\"billing_sync_slot\" is 2.1 GB behind; WAL retained")
    b.answer("It's growing by ~100 MB every half hour. The consumer of that slot is the old "
             "change-feed reader that the skewed node kept restarting. At this rate the WAL "
             "volume is fine for a few days, but we should drop the slot once the new feed is "
             "confirmed.")

    # 53
    b.user("ok note that for after cutover. can we see the disk on the primary?")
    b.tool("shell", {"host": "pg-ledger-primary.corp.lan", "cmd": "df -h /var/lib/postgresql"},
           "Filesystem      Size  Used Avail Use% Mounted on\n/dev/sdb1       1.0T  611G  "
           "413G  60% /var/lib/postgresql")
    b.answer("60 % used, 413 GB free. No urgency.")

    # 54
    b.user("what version of billing-sync is the newest? maybe we should ship the latest to ams2")
    b.tool("shell", {"host": "localhost", "cmd": "crane ls registry.corp.lan/payments/"
                     "billing-sync | sort -V | tail -5"},
           "2.7.2\n2.7.3\n2.7.4\n2.8.0-rc1\n2.8.0")
    b.answer("2.8.0 is out (there was an rc before it). Prod runs 2.7.4. Before switching I'd "
             "read the changelog.")

    # 55 -- compat flag renamed (tool)
    b.user("read it")
    b.tool("read_file", {"repo": "billing-sync", "path": "CHANGELOG.md", "lines": "1-30"},
           "# Changelog\n\n## 2.8.0 (2026-03-09)\n\n### Changed\n- The `--legacy-ledger` flag "
           "is renamed to `--ledger-compat`; the old name is gone in 2.8.0 and the worker "
           "refuses to start with it.\n- Checkpoints are stamped with the database clock "
           "(`now()` in the transaction) instead of the host clock.\n- `--metrics-addr` accepts "
           "a bare port (`:9465`).\n\n### Fixed\n- Pages with more than 10,000 invoices are "
           "split instead of timing out upstream.\n\n## 2.7.4 (2026-02-02)\n\n### Fixed\n- "
           "Retry budget resets after a quiet period.\n")
    b.answer("Two things matter for us in 2.8.0: the compat flag has a new name (the old one "
             "makes the worker refuse to start), and checkpoints now use the database clock, "
             "which removes the whole skew problem by design. I'd ship 2.8.0 to ams2 with "
             "`--ledger-compat`.")

    # 56
    b.user("agreed, 2.8.0 with the new flag. update the overlay")
    b.answer("```yaml\n# overlays/ams-k8s-2/kustomization.yaml\nimages:\n  - name: registry.corp."
             "lan/payments/billing-sync\n    newTag: 2.8.0\n```\n\n```yaml\n# overlays/ams-k8s-2/"
             "args.yaml (container args)\nargs: [\"--config\", \"/etc/billing-sync/config.yaml\", "
             "\"--log-format\", \"json\", \"--ledger-compat\", \"--metrics-addr\", \":9465\"]\n```")
    chat()

    # 58 -- backfill batch size (assistant, with keyword)
    b.user("The 37 parked invoices plus the gap from the skew — how do we backfill them into "
           "the new ledger without hammering it?")
    b.tool("shell", {"host": "pg-ledger-replica.corp.lan", "cmd": "psql -Atc \"select count(*) "
                     "from ledger_entries where checkpoint_at > now() + interval '1 second'\""},
           "412893")
    b.answer("Plan: about 413k rows carry a future checkpoint. I'll backfill in batches of "
             "25,000 rows, one batch per minute, each in its own transaction, rewriting "
             "checkpoint_at from the database clock. That keeps the primary under ~400 rows/s "
             "of extra writes, and the 37 dead-lettered invoices go in the first batch.")

    # 59
    b.user("write the backfill script")
    b.answer("```python\n\"\"\"Rewrite future checkpoints in fixed-size batches.\"\"\"\nimport "
             "time\n\nimport psycopg\n\nBATCH = 25_000\nPAUSE_S = 60\n\nSQL = \"\"\"\nwith "
             "victims as (\n  select id from ledger_entries\n  where checkpoint_at > now() + "
             "interval '1 second'\n  order by id limit %(batch)s\n  for update skip locked\n)\n"
             "update ledger_entries e set checkpoint_at = now()\nfrom victims v where e.id = "
             "v.id\n\"\"\"\n\n\ndef main(dsn: str) -> None:\n    with psycopg.connect(dsn, "
             "autocommit=False) as conn:\n        while True:\n            with conn.transaction"
             "():\n                n = conn.execute(SQL, {\"batch\": BATCH}).rowcount\n"
             "            print(f\"rewrote {n} rows\", flush=True)\n            if n < BATCH:\n"
             "                break\n            time.sleep(PAUSE_S)\n```\nRun it against "
             "staging first; it's idempotent, so a rerun is harmless.")

    # 60
    b.user("ran it on staging")
    b.tool("shell", {"host": "stg-ams-04.internal", "cmd": "tail -6 /srv/backfill/run-0314.log"},
           "rewrote 25000 rows\nrewrote 25000 rows\nrewrote 25000 rows\nrewrote 25000 rows\n"
           "rewrote 17311 rows\nexit status 0")
    b.answer("Staging had 117,311 affected rows; four full batches and a partial one, clean "
             "exit. Prod will take about 17 minutes at one batch a minute.")

    # 61 -- pool size superseded (tool)
    b.user("the DBA team said they changed the connection settings this morning, can you "
           "re-read the db config?")
    b.tool("read_file", {"repo": "infra", "path": "services/billing-sync/config/db.yaml"},
           "ledger:\n  host: pg-ledger-primary.corp.lan\n  port: 5432\n  database: ledger\n"
           "  user: billing_sync\n  pool_size: 64\n  pool_timeout: 20s\n  statement_timeout: 15s\n"
           "  sslmode: verify-full\nreplica:\n  host: pg-ledger-replica.corp.lan\n"
           "  pool_size: 16\n  lag_tolerance: 10s\n")
    b.answer("They raised the primary pool to 64 per pod and shortened the pool timeout to "
             "20 s; the replica side is unchanged. Three pods can now open 192 connections to "
             "the primary, still under its max_connections of 400.")

    # 62
    b.user("double-check max_connections is really 400")
    b.tool("shell", {"host": "pg-ledger-primary.corp.lan", "cmd": "psql -Atc 'show "
                     "max_connections'"}, "400")
    b.answer("Confirmed: 400.")

    # 63 -- on-call (user)
    b.user("Heads-up for tonight: Tomasz Nowak has the pager, not me. If the replication slot "
           "alert fires he's the one to ping.")
    b.answer("Okay — Tomasz Nowak is on call tonight and gets the slot alert.")
    chat()

    # 65
    b.user("can you add an alert rule for that slot so he actually gets paged?")
    b.answer("```yaml\ngroups:\n  - name: ledger-replication\n    rules:\n      - alert: "
             "ReplicationSlotRetainingWal\n        expr: pg_replication_slots_pg_wal_lsn_diff > "
             "3e9\n        for: 15m\n        labels:\n          severity: page\n          team: "
             "payments\n        annotations:\n          summary: \"Slot {{ $labels.slot_name }} "
             "retains {{ $value | humanize1024 }}B of WAL\"\n```\nIt pages once a slot holds "
             "more than 3 GB for 15 minutes — today's growth reaches that in about five hours.")

    # 66
    b.user("ship it to the rules repo (dry run)")
    b.tool("shell", {"host": "localhost", "cmd": "cd alert-rules && promtool check rules "
                     "payments/ledger-replication.yaml"},
           "Checking payments/ledger-replication.yaml\n  SUCCESS: 1 rules found")
    b.answer("promtool accepts it (1 rule). Ready to commit when you are.")

    # 67 -- cutover moved (user)
    b.user("Ugh, news from Priya's sync: the cutover moved to April 2. Finance closes the "
           "quarter that week and doesn't want the ledger moving under them, so everything "
           "shifts by five days.")
    b.answer("Okay, cutover is now April 2 (the earlier Saturday is off). The maintenance "
             "window stays Sunday-based unless the board says otherwise, so I'll check with "
             "you whether they re-issue it.")
    chat()

    # 69
    b.user("does the later date change anything on the cost side?")
    b.answer("A little: ams2 runs in parallel with the old cluster for five more days, about "
             "€265 extra at the current rate, still inside this month's cap but with only a "
             "few euros of slack. I'd postpone the extra worker node until after cutover.")

    # 70
    b.user("makes sense. let's deploy 2.8.0 to staging with the new args and watch it")
    b.tool("shell", {"host": "stg-ams-04.internal", "cmd": "systemctl restart billing-sync && "
                     "sleep 20 && journalctl -u billing-sync -n 12 --no-pager"},
           log_lines(rng, "billing-sync", 12, day=14))
    b.answer("2.8.0 started on staging with the new flag and is syncing normally: batches "
             "committing, checkpoint advancing.")

    # 71 -- known-good sha (tool, with keyword)
    b.user("if 2.8.0 misbehaves in prod what do we roll back to exactly?")
    b.tool("shell", {"host": "localhost", "cmd": "deployctl history billing-sync --env prod "
                     "--limit 3 --json"},
           json.dumps([{"release": "2.7.4", "sha": "9f3c2ab41e", "status": "completed",
                        "deployed_at": "2026-02-03T09:12:40Z", "health": "green"},
                       {"release": "2.7.3", "sha": "41d0e7c9b2", "status": "completed",
                        "deployed_at": "2026-01-20T14:01:03Z", "health": "green"},
                       {"release": "2.7.3-hotfix", "sha": "c07e11aa90", "status": "rolled_back",
                        "deployed_at": "2026-01-19T22:47:55Z", "health": "red"}], indent=2))
    b.answer("Roll back to 2.7.4, the release running in prod since February 3 with green "
             "health; the commit is in the history above. Note that rolling back means "
             "switching the flag back to its old name too, since 2.7.4 doesn't know the new one.")
    chat()

    # 73
    b.user("how are the staging pods doing after an hour?")
    b.tool("promql", {"query": "rate(billing_sync_rows_total{env=\"staging\"}[5m])", "range": "1h",
                      "step": "10m"},
           prom_series(rng, "billing_sync_rows_rate", {"env": "staging"}, 6, 40.0, 95.0))
    b.answer("Steady 40-95 rows/s, in line with staging traffic. No gaps.")

    # 74
    b.user("and the lag metric on staging?")
    b.tool("promql", {"query": "max(billing_sync_lag_seconds{env=\"staging\"})", "range": "1h",
                      "step": "10m"},
           prom_series(rng, "billing_sync_lag_seconds", {"env": "staging"}, 6, 0.2, 0.9))
    b.answer("Under a second the whole hour. With checkpoints on the database clock the jumps "
             "are gone.")

    # 75
    b.user("nice. what's left before we can call staging good?")
    b.answer("1. Replay the dead-lettered invoices against staging's upstream mock.\n2. Run the "
             "backfill dry run against a prod snapshot.\n3. Confirm the ServiceMonitor scrapes "
             "the new port.\n4. Load test the gateway limits on ams2.")

    # 76
    b.user("do 3")
    b.tool("shell", {"host": "stg-ams-04.internal", "cmd": "curl -s localhost:9465/metrics | "
                     "grep -E '^billing_sync_(rows_total|lag_seconds|checkpoint)' | head -5"},
           "billing_sync_rows_total 1883021\nbilling_sync_lag_seconds 0.412\n"
           "billing_sync_checkpoint_age_seconds 0.398\nbilling_sync_checkpoint_source{clock=\"db\"} 1")
    b.answer("The exporter answers on the new port and reports the database clock as the "
             "checkpoint source.")
    chat()

    # 78 -- channel (user)
    b.user("Also, tell people to move cutover chatter to #billing-cutover, the main payments "
           "channel is getting noisy.")
    b.answer("Okay, cutover discussion goes to #billing-cutover from now on; I'll use it in the "
             "update drafts.")

    # 79
    b.user("draft the message for that channel announcing the new date")
    b.answer("> **Billing-sync migration:** the cutover to ams-k8s-2 is now on **April 2** "
             "(moved because of the quarter close). The switch happens in the Sunday maintenance "
             "window; prep continues on staging this week. Questions here, please.")

    # 80
    b.user("good. load test — what tool do we have on staging?")
    b.tool("shell", {"host": "stg-ams-04.internal", "cmd": "ls /opt/loadtest && k6 version"},
           "gateway-invoices.js\nledger-write.js\nREADME.md\nk6 v0.52.0 (go1.22.4, linux/amd64)")
    b.answer("k6 0.52 with two scripts: gateway-invoices.js and ledger-write.js.")

    # 81
    b.user("run the invoices one at 1.2k rps for 2 minutes against ams2's gateway")
    b.tool("shell", {"host": "stg-ams-04.internal", "cmd": "k6 run -e RPS=1200 -e DURATION=2m "
                     "-e TARGET=https://gw.ams2.corp.lan /opt/loadtest/gateway-invoices.js | "
                     "tail -9"},
           "     checks.........................: 100.00% ✓ 143988      ✗ 12\n"
           "     http_req_duration..............: avg=38.2ms  min=4.1ms  med=31.7ms  "
           "max=611.5ms  p(90)=66.1ms  p(95)=88.4ms\n"
           "     http_req_failed................: 0.00%   ✓ 12          ✗ 143988\n"
           "     http_reqs......................: 144000  1199.98/s\n"
           "     iteration_duration.............: avg=39.1ms  min=4.9ms  med=32.5ms  max=612ms\n"
           "     iterations.....................: 144000  1199.98/s\n"
           "     vus............................: 60      min=48        max=60\n"
           "     vus_max........................: 100     min=100       max=100")
    b.answer("1,200 rps for two minutes: p95 88 ms, 12 failed checks out of 144k (timeouts at "
             "the very start while pods warmed up). Below the per-tenant limit nothing was "
             "throttled.")
    chat()

    # 83
    b.user("what were those 12 at the start?")
    b.tool("logs", {"service": "gateway", "cluster": "ams-k8s-2", "since": "15m", "grep": "504"},
           "\n".join(f"2026-03-14T15:02:0{i % 10}.{rng.randrange(1000):03d}Z WARN  gateway "
                     f"request method=GET path=/v1/invoices status=504 dur=5000ms "
                     f"upstream=billing-sync" for i in range(6)))
    b.answer("504s from the gateway in the first seconds: billing-sync's cache was cold. They "
             "stop after ~8 s. Harmless for the cutover, but a readiness probe that waits for "
             "the first sync would hide them.")

    # 84
    b.user("add that readiness probe to the overlay")
    b.answer("```yaml\nreadinessProbe:\n  httpGet:\n    path: /ready\n    port: 9465\n"
             "  initialDelaySeconds: 5\n  periodSeconds: 5\n  failureThreshold: 6\n```\n`/ready` "
             "returns 200 after the first full page is synced (added in 2.8.0).")

    # 85
    b.user("ok I think that's it for the technical bits today")
    b.answer("Agreed. Staging is on 2.8.0, metrics and alerts are in place, the backfill is "
             "tested, and the load test passed.")
    chat()

    # 87
    b.user("oh, one more: did the replica lag change after the DBA change?")
    b.tool("shell", {"host": "pg-ledger-replica.corp.lan", "cmd": "psql -Atc \"select "
                     "now() - pg_last_xact_replay_timestamp()\""}, "00:00:00.388120")
    b.answer("No, still about 0.4 s.")

    # 88 -- the final question needs every fact
    b.final("Alright, I'm logging off soon. Write the handover note for tomorrow morning, "
            "complete enough that someone new can continue without asking me anything. "
            "It must include: which host is staging; who gets status updates; the current "
            "cutover date and the maintenance window; the worker's compatibility flag as of "
            "the version we're shipping; the ledger DB pool size per pod now; the psycopg "
            "version we stay on; the gateway per-tenant limit; the metrics exporter port; the "
            "monthly cost cap; the signing key id; the dead-letter queue name; the replication "
            "slot we need to drop later; the backfill batch size; the clock skew we found on "
            "the old node; who's on call tonight; the commit we roll back to; and the channel "
            "for cutover chatter.")
    return b.finish("A: operations assistant, cluster migration", "ops", FACTS)

