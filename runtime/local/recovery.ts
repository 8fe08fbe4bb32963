// After a restart: adopt the sandboxes whose helper still answers, clean up the rest. Each slot's
// fate is planned from its record and whether its helper answers (recoveryPlan.ts); this only
// observes and applies, through the slot table the backend then serves from.
import path from "node:path";
import type { Clock } from "../core/clock.ts";
import type { Logger } from "../core/log.ts";
import { type CgroupLayout, killCgroup, listSandboxKeys, removeCgroup, sandboxDirs } from "./cgroups.ts";
import { readRecords, writeRecord } from "./records.ts";
import { planSlotRecovery, shouldProbeSlot } from "./recoveryPlan.ts";
import type { Slot, SlotEnv } from "./slot.ts";
import type { SlotTable } from "./slotTable.ts";
import type { WarmPool } from "./warmPool.ts";
import type { WorkspaceStore } from "./workspaces.ts";

export interface RecoveryDeps {
  stateDir: string;
  env: SlotEnv;
  slots: SlotTable;
  /** a recovered unclaimed slot is offered to it */
  pool: WarmPool<Slot>;
  workspaces: WorkspaceStore;
  logger: Logger;
  clock: Clock;
}

export async function recoverSlots(d: RecoveryDeps): Promise<void> {
  const { env, slots } = d;
  const { layout } = env;
  for (const { key, record, error } of readRecords(d.stateDir, d.logger)) {
    const slot = record && slots.adopt(env, key, record);
    const alive =
      !!slot &&
      shouldProbeSlot(record!) &&
      (await slot.attach().then(
        () => true,
        () => false,
      ));
    const plan = planSlotRecovery(record, { alive }, d.clock.now());
    if (plan.action === "remove" || !slot || !record) {
      d.logger.warn({ op: "recover", key, err: error }, "removing a sandbox directory without a readable record");
      await cleanCgroups(layout, key);
      await d.workspaces.remove(path.join(d.stateDir, "sandboxes", key));
      continue;
    }
    if (plan.action === "offer-to-pool" || plan.action === "destroy") {
      if (plan.action === "destroy" || !d.pool.adopt(record.image.profile, record.size.name, slot))
        await slot.destroy();
      continue;
    }
    slots.byId.set(record.sandbox!.id, slot);
    if (plan.action === "adopt") {
      if (plan.sandbox) {
        record.sandbox = plan.sandbox;
        await writeRecord(slot.paths, record);
      }
      slots.armTtl(slot);
      continue;
    }
    await slot.stop();
    if (plan.action === "mark-lost") {
      record.sandbox = plan.sandbox;
      await writeRecord(slot.paths, record);
    }
  }
  for (const key of listSandboxKeys(layout)) if (!slots.byKey.has(key)) await cleanCgroups(layout, key);
}

/**
 * Kills whatever still runs in sandbox `key`'s cgroups and removes them; the kernel refuses the
 * removal for a moment after the last process exits, hence the short retries. Also what close()
 * runs for every cgroup under the backend's root.
 */
export async function cleanCgroups(layout: CgroupLayout, key: string): Promise<void> {
  const dirs = sandboxDirs(layout, key);
  await killCgroup(layout, dirs);
  for (let i = 0; i < 200 && !removeCgroup(dirs); i++) await new Promise((r) => setTimeout(r, 5));
}
