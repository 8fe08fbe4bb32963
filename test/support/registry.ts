// The tests' and benchmarks' OCI registry: the runtime's own loopback docker-registry
// launcher (runtime/local/registry.ts), each instance in a temporary directory removed on stop.
import { type LocalRegistry, type LocalRegistryOptions, startLocalRegistry } from "../../runtime/local/registry.ts";

export { REGISTRY_BINARY } from "../../runtime/local/registry.ts";
export type TestRegistry = LocalRegistry;

export function startRegistry(opts: Omit<LocalRegistryOptions, "dir" | "purpose"> = {}): Promise<TestRegistry> {
  return startLocalRegistry({ ...opts, purpose: "test registry" });
}
