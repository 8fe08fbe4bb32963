// Per-team series (docs/tenancy.md): what each team holds on this replica against its limits,
// and the creates admission refused it, by reason (team_quota, team_rate, global_budget). Read
// at scrape time from Admission's own counts, so the create path pays nothing for them.
import { Counter, Gauge, type Registry } from "prom-client";
import type { AdmissionUsage } from "./admission.ts";

export function teamSeries(admission: () => AdmissionUsage, registers: Registry[]): void {
  new Gauge({
    name: "sbx_team_used",
    help: "what a team holds on this replica (resource=sandboxes|cpu_millis|memory_bytes); with tenancy configured",
    labelNames: ["team", "resource"],
    registers,
    collect() {
      for (const t of admission().teams ?? []) {
        this.set({ team: t.team, resource: "sandboxes" }, t.used.sandboxes);
        this.set({ team: t.team, resource: "cpu_millis" }, t.used.cpuMillis);
        this.set({ team: t.team, resource: "memory_bytes" }, t.used.memoryBytes);
      }
    },
  });
  new Gauge({
    name: "sbx_team_limit",
    help: "a team's configured hard limits across all replicas (resource=sandboxes|cpu_millis|memory_bytes|creates_per_minute|guarantee_cpu_millis|guarantee_memory_bytes); absent: no limit",
    labelNames: ["team", "resource"],
    registers,
    collect() {
      for (const t of admission().teams ?? []) {
        const l = t.limits;
        const set = (resource: string, v: number | undefined) =>
          v !== undefined && this.set({ team: t.team, resource }, v);
        set("sandboxes", l.sandboxes);
        set("cpu_millis", l.cpuMillis);
        set("memory_bytes", l.memoryBytes);
        set("creates_per_minute", l.createsPerMinute);
        set("guarantee_cpu_millis", t.guarantee?.cpuMillis);
        set("guarantee_memory_bytes", t.guarantee?.memoryBytes);
      }
    },
  });
  const seen = new Map<string, number>();
  new Counter({
    name: "sbx_team_rejects_total",
    help: "creates, warm claims and resumes refused with 429, by team and reason (team_quota|team_rate|global_budget)",
    labelNames: ["team", "reason"],
    registers,
    collect() {
      for (const t of admission().teams ?? []) {
        for (const [reason, n] of Object.entries(t.rejected)) {
          const key = `${t.team}\u0000${reason}`;
          // admission counts; a counter only goes up, so add what it counted since the last scrape
          this.inc({ team: t.team, reason }, Math.max(0, n - (seen.get(key) ?? 0)));
          seen.set(key, n);
        }
      }
    },
  });
}
