// Compile-time checks of the Platform contract (runtime/platform.ts), run by the type check in
// `npm test` (`tsc --noEmit`; tsconfig.json includes test/): each line under `@ts-expect-error`
// must fail to compile, else tsc fails with "Unused '@ts-expect-error' directive". So dropping
// specOf from a platform that releases compute is a type error, not a resume that loses env.
import type { Backend } from "../../runtime/core/types.ts";
import type { KubernetesBackend } from "../../runtime/k8s/backend.ts";
import type { LocalBackend } from "../../runtime/local/backend.ts";
import type { PauseSupport, Platform } from "../../runtime/platform.ts";

declare const backend: LocalBackend;
declare const rest: Omit<Platform, "backend" | "pause">;
const specOf: PauseSupport["specOf"] = (id) => backend.specOf(id);

// the local platform's pause support as createLocalPlatform (runtime/local/platform.ts) builds it
export const local: Platform = { ...rest, backend, pause: { compute: backend.compute, specOf } };

// @ts-expect-error specOf is required with compute: without it a sandbox's env is lost on resume
export const withoutSpecOf: Platform = { ...rest, backend, pause: { compute: backend.compute } };

// @ts-expect-error and the other way round: a spec without the compute release is no pause support
export const withoutCompute: Platform = { ...rest, backend, pause: { specOf } };

// The Kubernetes backend is exactly a Backend: no public member the interface does not declare
// (test hooks live on KubernetesPlatform.testing), and none of Backend's left out.
type SameKeys<A, B> = [Exclude<A, B>, Exclude<B, A>] extends [never, never]
  ? true
  : { onlyLeft: Exclude<A, B>; onlyRight: Exclude<B, A> };
export const kubernetesBackendIsExactlyBackend: SameKeys<keyof KubernetesBackend, keyof Backend> = true;
