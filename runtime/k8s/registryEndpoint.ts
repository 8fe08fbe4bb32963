// Where an in-cluster snapshot registry is right now (config snapshots.inCluster): one of the
// ready pods behind its Service, read from the Service's EndpointSlices every few seconds on
// the injected clock. Replicas and sandbox pods both go to that pod address, so neither needs
// cluster DNS or a ClusterIP (kube-proxy) on the way, and a NetworkPolicy that admits the
// registry's pods by label matches what a sandbox sends (a policy is judged after a ClusterIP
// is translated, on most network plugins).
//
// The choice is sticky: the address in use stays while its pod is ready, so an upload's
// PATCHes keep reaching the instance that holds the upload. With no ready pod known (before
// the first read, or while the registry restarts), `current()` is the Service's own DNS name:
// a real cluster still gets there through kube-proxy, and elsewhere the call fails with the
// registry's name in the message, as any registry that is down does.
import type { DiscoveryV1Api, V1EndpointSlice } from "@kubernetes/client-node";
import type { Clock } from "../core/clock.ts";
import type { Logger } from "../core/log.ts";

export interface RegistryService {
  name: string;
  namespace: string;
  port: number;
}

export interface RegistryEndpointOptions {
  discovery: Pick<DiscoveryV1Api, "listNamespacedEndpointSlice">;
  service: RegistryService;
  clock: Clock;
  logger: Logger;
  /** how often the EndpointSlices are read; default 5 s */
  refreshMs?: number;
}

export const REGISTRY_ENDPOINT_REFRESH_MS = 5_000;

export class RegistryEndpoint {
  private address?: string;
  private readonly fallback: string;
  private readonly stopped = new AbortController();
  private warnedNone = false;
  private loop?: Promise<void>;

  constructor(private readonly o: RegistryEndpointOptions) {
    const s = o.service;
    this.fallback = `http://${s.name}.${s.namespace}.svc:${s.port}`;
  }

  /** http://<pod ip>:<port> of a ready registry pod, or the Service's DNS name when none is known. */
  current(): string {
    return this.address ?? this.fallback;
  }

  /** Reads the endpoints now, then again every refreshMs until stop(). */
  start(): void {
    if (this.loop) return;
    this.loop = (async () => {
      const every = this.o.refreshMs ?? REGISTRY_ENDPOINT_REFRESH_MS;
      while (!this.stopped.signal.aborted) {
        await this.refresh();
        await this.o.clock.sleep(every, this.stopped.signal).catch(() => undefined);
      }
    })();
  }

  async stop(): Promise<void> {
    this.stopped.abort();
    await this.loop;
  }

  /** One read of the Service's EndpointSlices; a failed read keeps the address in use. */
  async refresh(): Promise<void> {
    const { name, namespace } = this.o.service;
    let slices: V1EndpointSlice[];
    try {
      slices = (
        await this.o.discovery.listNamespacedEndpointSlice({
          namespace,
          labelSelector: `kubernetes.io/service-name=${name}`,
        })
      ).items;
    } catch (err) {
      this.o.logger.warn(
        { service: `${namespace}/${name}`, err: (err as Error).message },
        "could not read the snapshot registry's endpoints; keeping the address in use",
      );
      return;
    }
    const ready = readyAddresses(slices, this.o.service.port);
    const next = this.address && ready.includes(this.address) ? this.address : ready[0];
    if (next === this.address) return;
    if (next) {
      this.warnedNone = false;
      this.o.logger.info(
        { service: `${namespace}/${name}`, address: next, was: this.address ?? null },
        "the in-cluster snapshot registry is at this pod address now",
      );
    } else if (!this.warnedNone) {
      this.warnedNone = true;
      this.o.logger.warn(
        { service: `${namespace}/${name}`, was: this.address ?? null },
        `the in-cluster snapshot registry has no ready pod; snapshot calls go to ${this.fallback} until one is`,
      );
    }
    this.address = next;
  }
}

/** http://ip:port of every ready IPv4 endpoint, sorted, so replicas tend to agree on the first. */
export function readyAddresses(slices: V1EndpointSlice[], servicePort: number): string[] {
  const out = new Set<string>();
  for (const s of slices) {
    if (s.addressType !== "IPv4") continue;
    // a slice lists target ports: the one equal to the Service's port if any (ours are equal), else its first
    const port = s.ports?.find((p) => p.port === servicePort)?.port ?? s.ports?.[0]?.port ?? servicePort;
    for (const e of s.endpoints ?? []) {
      const c = e.conditions;
      if (c?.ready === false || c?.terminating === true) continue;
      for (const a of e.addresses) out.add(`http://${a}:${port}`);
    }
  }
  return [...out].sort();
}
