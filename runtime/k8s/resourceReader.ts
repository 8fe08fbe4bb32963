// Backend.readResources on Kubernetes: each running sandbox whose command channel is already
// open is read inside its pod (podResources.ts's script, one short command over that channel).
// Why the channel and not the API: the metrics API or the kubelet's summary through the API
// server's node proxy is an API request per node (or per pod) per tick, through the API server
// this replica shares with every other client; the channel is already open for the sandbox's
// commands and costs no API request at all. A sandbox with no open channel (never used since
// this replica started, or on the per-exec websocket path) is not read: opening a channel just to
// sample it would be an API request per sandbox. Cost: one sh process in the pod per tick.
import type { Logger } from "../core/log.ts";
import type { ResourceReading } from "../core/types.ts";
import type { SandboxChannels } from "./channel/sandboxChannels.ts";
import { POD_RESOURCES_SCRIPT, parsePodResources } from "./podResources.ts";
import type { SandboxIndex } from "./sandboxIndex.ts";

/** reads in flight at once: a tick of 1,000 sandboxes must not open 1,000 streams together */
const CONCURRENCY = 32;
/** a pod that takes longer is left out of this tick */
const READ_TIMEOUT_MS = 10_000;
/** the script writes a few hundred bytes; more is not its answer */
const MAX_OUTPUT = 4096;

export function podResourceReader(o: {
  index: SandboxIndex;
  channels: SandboxChannels;
  logger: Logger;
}): () => Promise<ResourceReading[]> {
  const readOne = async (id: string): Promise<ResourceReading | undefined> => {
    const cr = o.index.resource(id);
    const pod = o.index.podOf(id)?.metadata?.name;
    if (!cr || !pod) return undefined;
    const session = await o.channels.exec(
      id,
      pod,
      { command: ["sh", "-c", POD_RESOURCES_SCRIPT], timeoutMs: READ_TIMEOUT_MS },
      {},
    );
    if (!session) return undefined;
    let out = "";
    session.stdout.on("data", (c: Buffer) => {
      if (out.length < MAX_OUTPUT) out += c.toString();
    });
    session.stderr.resume();
    const r = await session.result;
    if (r.exitCode !== 0) return undefined;
    const size = cr.spec.resources;
    return {
      id,
      owner: cr.spec.owner,
      cpuLimitMillis: size.cpuLimitMillis,
      memoryLimitBytes: size.memoryLimitBytes,
      pidsLimit: size.pids,
      workspaceBytes: size.workspaceBytes,
      ...parsePodResources(out),
    };
  };
  return async () => {
    const ids = o.index
      .sandboxes()
      .filter((s) => s.phase === "Running" && s.ready && o.channels.pool.current(s.id))
      .map((s) => s.id);
    const out: ResourceReading[] = [];
    let next = 0;
    const worker = async () => {
      while (next < ids.length) {
        const id = ids[next++];
        try {
          const r = await readOne(id);
          if (r) out.push(r);
        } catch (err) {
          o.logger.warn(
            { sandbox: id, op: "resources", err: (err as Error).message },
            "reading the sandbox's resources in its pod failed; it is read again next tick",
          );
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(CONCURRENCY, ids.length) }, worker));
    return out;
  };
}
