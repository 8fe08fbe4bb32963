// What every envd handler gets: the caller the access check resolved (passed from the fastify
// route into the Connect handler as a context value) and the shared dependencies.
import { createContextKey, type HandlerContext } from "@connectrpc/connect";
import type { Logger } from "../../../core/log.ts";
import type { Manager } from "../../../core/types.ts";
import type { EnvdCaller } from "../access.ts";
import type { ProcessRegistry } from "./registry.ts";
import type { WatcherSlots, WatchLimits } from "./watchers.ts";

export const CALLER = createContextKey<EnvdCaller | undefined>(undefined, { description: "envd caller" });

export interface EnvdServices {
  manager: Manager;
  registry: ProcessRegistry;
  logger: Logger;
  /** how often an idle Start/Connect/WatchDir stream sends a keepalive event */
  keepaliveMs: number;
  /** WatchDir's polling interval and bounds */
  watch: WatchLimits;
  /** open WatchDir streams per owner (bounded by watch.maxPerOwner) */
  watchers: WatcherSlots;
}

/** The resolved caller; the route only hands requests that passed the access check to Connect. */
export function callerOf(ctx: HandlerContext): EnvdCaller {
  const caller = ctx.values.get(CALLER);
  if (!caller) throw new Error("envd handler reached without a resolved caller");
  return caller;
}
