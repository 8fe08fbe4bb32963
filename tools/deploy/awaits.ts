// Pulumi's Kubernetes provider waits, on create and update, until a Deployment's pods are
// Ready and a Service has endpoints (default: 10 minutes, then the update fails). That is
// the behaviour a deploy of the product wants, so it is the driver's default. A test that
// checks only which objects exist (not that the runtime runs) opts out with this transform,
// which marks those two kinds with the provider's `pulumi.com/skipAwait` annotation in the
// driver's program only: the shipped components never carry it.
import type * as pulumi from "@pulumi/pulumi";

export const SKIP_AWAIT_ANNOTATION = "pulumi.com/skipAwait";
/** The kinds whose await depends on pods really running and passing their probes. */
const AWAITED_ON_PODS = new Set(["kubernetes:apps/v1:Deployment", "kubernetes:core/v1:Service"]);

export function skipPodAwaits(args: pulumi.ResourceTransformArgs): pulumi.ResourceTransformResult | undefined {
  if (!AWAITED_ON_PODS.has(args.type)) return undefined;
  const metadata = { ...(args.props.metadata ?? {}) };
  metadata.annotations = { ...(metadata.annotations ?? {}), [SKIP_AWAIT_ANNOTATION]: "true" };
  return { props: { ...args.props, metadata }, opts: args.opts };
}

export const TIMEOUT_ANNOTATION = "pulumi.com/timeoutSeconds";

/**
 * Bounds those awaits at `seconds` instead of the provider's 10 minutes, so a deploy whose
 * pods never get Ready fails while there is still time to say why (the deploy suite).
 */
export function boundPodAwaits(seconds: number) {
  return (args: pulumi.ResourceTransformArgs): pulumi.ResourceTransformResult | undefined => {
    if (!AWAITED_ON_PODS.has(args.type)) return undefined;
    const metadata = { ...(args.props.metadata ?? {}) };
    metadata.annotations = { ...(metadata.annotations ?? {}), [TIMEOUT_ANNOTATION]: String(seconds) };
    return { props: { ...args.props, metadata }, opts: args.opts };
  };
}
