// Per-owner resource totals (docs/resources.md): the sum over each owner's sandboxes of their
// newest sample, read at scrape time from the sampler. Labelled by owner only, never by sandbox,
// so the series count grows with owners, not with sandboxes.
import { Counter, Gauge, type Registry } from "prom-client";
import type { OwnerResourceTotals } from "./resourceSampler.ts";

export function resourceSeries(totals: () => OwnerResourceTotals[], registers: Registry[]): Counter {
  new Gauge({
    name: "sbx_owner_resources",
    help: "what an owner's sampled sandboxes use now, summed (resource=sandboxes|cpu_cores|memory_bytes|workspace_bytes); memory is the working set",
    labelNames: ["owner", "resource"],
    registers,
    collect() {
      // owners whose sandboxes all went drop out instead of staying at their last value
      this.reset();
      for (const t of totals()) {
        this.set({ owner: t.owner, resource: "sandboxes" }, t.sandboxes);
        this.set({ owner: t.owner, resource: "cpu_cores" }, t.cpuCores);
        this.set({ owner: t.owner, resource: "memory_bytes" }, t.memoryBytes);
        this.set({ owner: t.owner, resource: "workspace_bytes" }, t.workspaceUsedBytes);
      }
    },
  });
  return new Counter({
    name: "sbx_memory_warnings_total",
    help: "times a sandbox passed resources.memoryWarnFraction of its memory limit (counted once per crossing)",
    registers,
  });
}
