// The policies of the sandboxes that have one, parsed from what the backend stored at create.
// A stored document the current parser refuses (written before it became strict, or edited
// on the Sandbox object) takes only its own sandbox out of automatic pause/wake: one bad
// document must not fail the tick for every sandbox. Logged once per sandbox, not every tick.
import type { Logger } from "../core/log.ts";
import type { Sandbox } from "../core/types.ts";
import { type AutoPausePolicy, validateAutoPause } from "./spec.ts";

export class StoredPolicies {
  private warned = new Set<string>();
  constructor(private readonly logger: Logger) {}

  of(sandboxes: Sandbox[]): { sandbox: Sandbox; policy: AutoPausePolicy }[] {
    const out: { sandbox: Sandbox; policy: AutoPausePolicy }[] = [];
    const stillBad = new Set<string>();
    for (const s of sandboxes) {
      if (s.autoPause === undefined) continue;
      try {
        out.push({ sandbox: s, policy: validateAutoPause(s.autoPause, `sandbox ${s.id} autoPause`) });
      } catch (err) {
        stillBad.add(s.id);
        if (!this.warned.has(s.id)) {
          this.logger.warn(
            { sandbox: s.id, owner: s.owner, op: "autopause", err },
            "stored autoPause policy is invalid: this sandbox is not paused or woken automatically; recreate it with a valid policy",
          );
        }
      }
    }
    this.warned = stillBad; // forget sandboxes that are gone, so the set stays as small as the bad ones
    return out;
  }
}
