// Test wiring: what a caller of the pause/resume service sees, without the Manager's admission
// and audit: the backend's calls, with the service's auto-resume decision in front of the ones
// that need a running sandbox, and reads through the service's view. `routeAutoResume` installs
// the wake the Manager would do (its admission-checked resume); without it the service resumes.
import type { Readable } from "node:stream";
import type {
  Backend,
  ExecRequest,
  ExecSession,
  Sandbox,
  SandboxSpec,
  TransferOptions,
  WaitOptions,
} from "../../runtime/core/types.ts";
import type { PauseResume } from "../../runtime/snapshot/service.ts";

export interface PauseCaller {
  /** the service itself (status, pause, resume, recover, ...) */
  snapshotter: PauseResume;
  start(): Promise<void>;
  close(): Promise<void>;
  provision(spec: SandboxSpec): Promise<Sandbox>;
  awaitReady(id: string, opts: WaitOptions): Promise<Sandbox>;
  pause(id: string, opts?: TransferOptions): Promise<Sandbox>;
  resume(id: string, opts?: TransferOptions): Promise<Sandbox>;
  exec(id: string, req: ExecRequest): Promise<ExecSession>;
  getArchive(id: string, path: string): Promise<Readable>;
  describe(id: string): Promise<Sandbox | undefined>;
  list(): Promise<Sandbox[]>;
  delete(id: string): Promise<void>;
  routeAutoResume(wake: (id: string, op: string) => Promise<void>): void;
}

export function pauseCaller(backend: Backend, pr: PauseResume): PauseCaller {
  let wake: ((id: string, op: string) => Promise<void>) | undefined;
  const ensureRunning = async (id: string, what: string) => {
    if (!(await pr.wakeNeeded(id, what))) return;
    if (wake) await wake(id, what);
    else await pr.resume(id);
  };
  return {
    snapshotter: pr,
    async start() {
      await backend.start();
      await pr.recover();
    },
    close: () => backend.close(),
    provision: (spec) => backend.provision(spec),
    async awaitReady(id, opts) {
      await ensureRunning(id, "wait");
      return backend.awaitReady(id, opts);
    },
    async pause(id, opts = {}) {
      await pr.pause(id, opts);
      return (await pr.describe(id))!;
    },
    resume: (id, opts = {}) => pr.resume(id, opts),
    async exec(id, req) {
      await ensureRunning(id, "exec");
      return backend.exec(id, req);
    },
    async getArchive(id, path) {
      await ensureRunning(id, "download files");
      return backend.getArchive(id, path);
    },
    describe: (id) => pr.describe(id),
    list: () => pr.list(),
    delete: (id) => pr.delete(id),
    routeAutoResume(w) {
      wake = w;
    },
  };
}
