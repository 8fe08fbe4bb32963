// The local platform (runtime/platform.ts): the bubblewrap backend, its pause support (a local
// delete removes only the slot, and the slot record keeps the create-time spec, env included),
// and the automatic pause/wake status in files under the state dir. One process, no replicas.
import { join } from "node:path";
import { FileStatusStore } from "../autopause/controller.ts";
import type { RuntimeConfig } from "../config/schema.ts";
import type { Platform } from "../platform.ts";
import { LocalBackend, type LocalBackendDeps } from "./backend.ts";

export function createLocalPlatform(config: RuntimeConfig, deps: LocalBackendDeps): Platform {
  const backend = new LocalBackend(config, deps);
  return {
    backend,
    pause: {
      compute: backend.compute,
      specOf: (id) => backend.specOf(id),
    },
    autoPauseStatus: new FileStatusStore(join(config.local.stateDir, "autopause")),
    close: () => backend.close(),
  };
}
