// The process table the envd layer uses: per command, the registry that can reach it. A command
// Manager.exec started over the sandbox's own registry (Kubernetes over the helper: the session
// carries the registry's id) is a HelperProcessRegistry process, found by every replica; any
// other (the local platform, a pod on the per-exec websocket path) is this replica's
// MemoryProcessRegistry process. List shows both; a pid is looked up here first (only this
// replica's websocket-path commands are here) and then in the sandbox.
import type { Writable } from "node:stream";
import type { ExecSession, Manager } from "../../../core/types.ts";
import type { EnvdCaller } from "../access.ts";
import { HelperProcessRegistry, type HelperRegistryOptions, isRegistered } from "./helperRegistry.ts";
import {
  MemoryProcessRegistry,
  type ProcessRegistry,
  type ProcessSelector,
  type ProcessSpec,
  type StartedProcess,
  type TrackedProcess,
} from "./registry.ts";

export class ProcessTable implements ProcessRegistry {
  readonly memory = new MemoryProcessRegistry();
  readonly helper: HelperProcessRegistry;

  constructor(
    private readonly manager: Manager,
    o: HelperRegistryOptions = {},
  ) {
    this.helper = new HelperProcessRegistry(manager, o);
  }

  add(caller: EnvdCaller, spec: ProcessSpec, session: ExecSession, stdin?: Writable): Promise<StartedProcess> {
    if (isRegistered(session) && this.manager.attachCommand) return this.helper.add(caller, spec, session, stdin);
    return this.memory.add(caller, spec, session, stdin);
  }

  async list(caller: EnvdCaller): Promise<TrackedProcess[]> {
    const [here, there] = await Promise.all([this.memory.list(caller), this.helper.list(caller)]);
    return [...here, ...there];
  }

  async find(caller: EnvdCaller, selector: ProcessSelector): Promise<TrackedProcess | undefined> {
    return (await this.memory.find(caller, selector)) ?? this.helper.find(caller, selector);
  }
}
