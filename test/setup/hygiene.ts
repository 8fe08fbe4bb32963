// The suite's own hygiene, checked in the k8s project's teardown (issue 39: a fresh clone's
// `npm test` left a force-deleted pod's bubblewrap and its `sleep` running for good):
// - before the stop, no container process runs for a pod that no longer exists (sbx-kubelet's
//   reconcile kills those within seconds; a real kubelet does the same);
// - after the stop, nothing tied to the run's directory is alive (the stop kills and records
//   whatever a component leaked: processes.ts sweepOnStop).
// A finding fails the run (exit code 1) and names each process.
import { join } from "node:path";
import { CoreV1Api, KubeConfig } from "@kubernetes/client-node";
import { describeLeftovers, type Leftover, processesUnder } from "../../tools/control-plane/leftovers.ts";

/** The pod UID a process under `podsDir` belongs to (its path is `<podsDir>/<uid>/...`). */
function podUid(podsDir: string, p: Leftover): string {
  return p.path.slice(join(podsDir, "/").length).split("/")[0] ?? "";
}

async function livePodUids(kubeconfigPath: string): Promise<Set<string>> {
  const kc = new KubeConfig();
  kc.loadFromFile(kubeconfigPath);
  const pods = await kc.makeApiClient(CoreV1Api).listPodForAllNamespaces();
  return new Set(pods.items.map((p) => p.metadata?.uid ?? ""));
}

/**
 * Container processes whose pod is gone from the API server, once sbx-kubelet has had `waitMs`
 * (a few of its reconcile rounds) to kill them. Processes of pods that still exist (being
 * deleted, or left by a test) are not counted here: the stop kills those.
 */
export async function orphanedContainers(
  kubeconfigPath: string,
  podsDir: string,
  waitMs = 20_000,
): Promise<Leftover[]> {
  const deadline = Date.now() + waitMs;
  for (;;) {
    const live = await livePodUids(kubeconfigPath);
    // a uid-less path is the pods dir itself: sbx-kubelet's own --root
    const orphans = processesUnder([podsDir]).filter((p) => {
      const uid = podUid(podsDir, p);
      return uid !== "" && !live.has(uid);
    });
    if (orphans.length === 0 || Date.now() > deadline) return orphans;
    await new Promise((r) => setTimeout(r, 500));
  }
}

/** The failure message for what the checks found, or undefined when the run was clean. */
export function hygieneReport(dir: string, orphans: Leftover[], leaked: Leftover[]): string | undefined {
  const parts: string[] = [];
  if (orphans.length > 0)
    parts.push(
      `container processes of pods that no longer exist were still running before the stop ` +
        `(sbx-kubelet's reconcile should have killed them; tools/control-plane/cmd/sbx-kubelet/reconcile.go):\n` +
        describeLeftovers(orphans),
    );
  if (leaked.length > 0)
    parts.push(
      `processes tied to ${dir} outlived the stop of every component and were killed by its sweep ` +
        `(a component leaked them; docs/control-plane.md "Stopping"):\n${describeLeftovers(leaked)}`,
    );
  return parts.length > 0 ? `control plane hygiene: ${parts.join("\n")}` : undefined;
}
