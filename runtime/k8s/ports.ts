// The Kubernetes backend's openPort (docs/ports.md "Kubernetes"): over the pod's command channel
// where the helper runs there (channel/tunnel.ts: the daemon connects to the port on the pod's
// loopback), else the API server's port-forward to the pod (portForward.ts), which the kubelet
// connects to 127.0.0.1:<port> inside the pod's own network namespace. Either way only the
// sandbox's ports are reachable. Port-forward needs RBAC pods/portforward create in the sandbox
// namespace (contract.ts, the manager's role).
import type { Duplex } from "node:stream";
import type { PortPathStats } from "../core/types.ts";
import type { SandboxChannels } from "./channel/sandboxChannels.ts";
import type { SandboxLookup } from "./lookup.ts";
import type { KubernetesParts } from "./parts.ts";
import { listeningProbeArgv, openPodPort, PodPortRefused } from "./portForward.ts";

export interface SandboxPorts {
  openPort(id: string, port: number): Promise<Duplex>;
  portStats(): PortPathStats;
}

export function sandboxPorts(
  p: Pick<KubernetesParts, "clients" | "namespace" | "runInPod">,
  lookup: SandboxLookup,
  channels: Pick<SandboxChannels, "tunnel">,
): SandboxPorts {
  const counts: PortPathStats = { channel: 0, portForward: 0 };
  return {
    portStats: () => ({ ...counts }),
    async openPort(id, port) {
      const { podName } = await lookup.runningPod(id);
      const tunnel = await channels.tunnel(id, podName, port);
      if (tunnel) {
        counts.channel++;
        return tunnel;
      }
      counts.portForward++;
      const stream = await openPodPort(p.clients.kc, { namespace: p.namespace, pod: podName, sandboxId: id, port });
      // port-forward cannot tell a refused connect at open; this can, at the cost of an exec
      return Object.assign(stream, {
        confirmListening: async () => {
          const session = await p.runInPod(podName, listeningProbeArgv(port));
          session.stdout.resume();
          session.stderr.resume();
          const { exitCode } = await session.result;
          if (exitCode !== 0)
            throw new PodPortRefused(id, port, `no socket listens on port ${port} in the pod (exit ${exitCode})`, true);
        },
      });
    },
  };
}
