// The Kubernetes contract between the runtime and the Pulumi package: API group, labels,
// the Sandbox CRD, and the exact RBAC rules the manager and controller need. Pure data:
// the Pulumi Runtime component deploys these objects and the runtime relies on them, so a
// change here changes both sides at once.

import { createHash } from "node:crypto";
import { sharesLeaseName } from "./budget/sharePlan.ts";

export const API_GROUP = "sbx.dev";
export const API_VERSION = "v1alpha1";
export const SANDBOX_KIND = "Sandbox";
export const SANDBOX_PLURAL = "sandboxes";

/** Label and annotation keys set on sandbox pods and custom resources. */
export const LABELS = {
  managed: "sbx.dev/managed", // "true" on everything the runtime owns
  sandbox: "sbx.dev/sandbox", // sandbox id
  owner: "sbx.dev/owner", // hashed owner (label-safe); the plain owner is in an annotation
  profile: "sbx.dev/profile",
  size: "sbx.dev/size",
  pool: "sbx.dev/pool", // "warm" while unclaimed, "claimed" after
} as const;

/** Values of LABELS.pool. A claimed pod never goes back to "warm". */
export const POOL = { warm: "warm", claimed: "claimed" } as const;

/** The one container of a sandbox pod: exec, logs and status truth all read this name. */
export const SANDBOX_CONTAINER = "sandbox";

/** Owner ids are free-form; label values are not. The hash is stable and label-safe. */
export function ownerLabelValue(owner: string): string {
  return createHash("sha256").update(owner).digest("hex").slice(0, 40);
}

export const ANNOTATIONS = {
  owner: "sbx.dev/owner",
  clientKey: "sbx.dev/client-key",
  lastActivity: "sbx.dev/last-activity",
  expiresAt: "sbx.dev/expires-at",
  metadata: "sbx.dev/metadata",
  /** when a warm pod was claimed (orphan sweep: a claimed pod whose Sandbox never appeared) */
  claimedAt: "sbx.dev/claimed-at",
  /** set at warm-claim time, when credentials went in before the record existed */
  credentialsExpiresAt: "sbx.dev/credentials-expires-at",
} as const;

/** Node label and taint that mark sandbox nodes (the Pulumi node groups set them). */
export const SANDBOX_NODE_LABEL = { key: "sbx.dev/node-role", value: "sandbox" } as const;
export const SANDBOX_NODE_TAINT = { key: "sbx.dev/sandbox", value: "true", effect: "NoSchedule" } as const;

export interface PolicyRule {
  apiGroups: string[];
  resources: string[];
  verbs: string[];
  resourceNames?: string[];
}

export type DeployedRole = "manager" | "controller";

/**
 * Least privilege per deployed role (runtime/config/role.ts says who does what; the Pulumi
 * package renders these, test/k8s/runtime/roles.test.ts runs each role with exactly them).
 * Both watch pods and records (the shared informers) and patch, create and delete pods (the
 * manager claims warm pods and reconciles what it starts; the controller refills and reaps).
 * Only the manager accepts creates (sandboxes create), streams logs and relays ports
 * (pods/portforward); only the controller touches the Lease, and only the one it is configured
 * with. Nothing reads ConfigMaps, ResourceQuotas or writes Events through the API (config is
 * mounted), so neither gets them.
 * The manager never leads; in the runtime namespace it may touch only the budget shares Lease
 * (runtime/k8s/budget: several manager replicas share one admission budget).
 */
// Over 60 lines on purpose: the RBAC rules as Kubernetes reads them, one entry per resource, so a review sees the
// grant whole.
export function roleRules(
  role: DeployedRole,
  leaseName: string,
): { sandboxNamespace: PolicyRule[]; runtimeNamespace: PolicyRule[] } {
  const pods: PolicyRule = {
    apiGroups: [""],
    resources: ["pods"],
    verbs: ["get", "list", "watch", "create", "patch", "delete"],
  };
  const exec: PolicyRule = { apiGroups: [""], resources: ["pods/exec"], verbs: ["create", "get"] };
  const status: PolicyRule = {
    apiGroups: [API_GROUP],
    resources: [`${SANDBOX_PLURAL}/status`],
    verbs: ["get", "patch"],
  };
  const records = (verbs: string[]): PolicyRule => ({ apiGroups: [API_GROUP], resources: [SANDBOX_PLURAL], verbs });
  // where an in-cluster snapshot registry's ready pods are (runtime/k8s/registryEndpoint.ts)
  const registryEndpoints: PolicyRule = {
    apiGroups: ["discovery.k8s.io"],
    resources: ["endpointslices"],
    verbs: ["list"],
  };
  if (role === "manager")
    return {
      sandboxNamespace: [
        pods,
        exec,
        { apiGroups: [""], resources: ["pods/log"], verbs: ["get"] },
        // relaying traffic to sandbox ports (runtime/k8s/ports.ts), as for exec: the websocket
        // upgrade is a GET, authorized as get, and create is what the API server also requires
        // of it with AuthorizePodWebsocketUpgradeCreatePermission (and what SPDY's POST needs)
        { apiGroups: [""], resources: ["pods/portforward"], verbs: ["create", "get"] },
        records(["get", "list", "watch", "create", "patch", "delete"]),
        status,
      ],
      runtimeNamespace: [
        registryEndpoints,
        { apiGroups: ["coordination.k8s.io"], resources: ["leases"], verbs: ["create"] },
        {
          apiGroups: ["coordination.k8s.io"],
          resources: ["leases"],
          // patch: a replica renews its own entry with a JSON patch (budget/shareEntries.ts)
          verbs: ["get", "update", "patch"],
          resourceNames: [sharesLeaseName(leaseName)],
        },
      ],
    };
  return {
    sandboxNamespace: [pods, exec, records(["get", "list", "watch", "patch", "delete"]), status],
    runtimeNamespace: [
      registryEndpoints,
      // create cannot be limited by name (the object does not exist yet); get and update can
      { apiGroups: ["coordination.k8s.io"], resources: ["leases"], verbs: ["create"] },
      {
        apiGroups: ["coordination.k8s.io"],
        resources: ["leases"],
        verbs: ["get", "update"],
        resourceNames: [leaseName],
      },
    ],
  };
}

/** The Sandbox CRD: the durable record of a sandbox that must outlive its pod (pause). */
// Over 60 lines on purpose: the CRD's schema literal as the API server reads it; split, it no longer reads as the
// manifest.
export function sandboxCrd(): Record<string, unknown> {
  const str = { type: "string" };
  return {
    apiVersion: "apiextensions.k8s.io/v1",
    kind: "CustomResourceDefinition",
    metadata: { name: `${SANDBOX_PLURAL}.${API_GROUP}` },
    spec: {
      group: API_GROUP,
      scope: "Namespaced",
      names: {
        kind: SANDBOX_KIND,
        plural: SANDBOX_PLURAL,
        singular: "sandbox",
        listKind: "SandboxList",
        shortNames: ["sbx"],
      },
      versions: [
        {
          name: API_VERSION,
          served: true,
          storage: true,
          subresources: { status: {} },
          additionalPrinterColumns: [
            { name: "Phase", type: "string", jsonPath: ".status.phase" },
            { name: "Profile", type: "string", jsonPath: ".spec.profile" },
            { name: "Size", type: "string", jsonPath: ".spec.size" },
            { name: "Age", type: "date", jsonPath: ".metadata.creationTimestamp" },
          ],
          schema: {
            openAPIV3Schema: {
              type: "object",
              properties: {
                spec: {
                  type: "object",
                  required: ["owner", "profile", "size", "image"],
                  properties: {
                    owner: str,
                    profile: str,
                    size: str,
                    image: str,
                    ttlSeconds: { type: "integer", minimum: 1 },
                    idleTimeoutSeconds: { type: "integer", minimum: 0 },
                    clientKey: str,
                    env: { type: "object", additionalProperties: str },
                    metadata: { type: "object", additionalProperties: str },
                    desiredState: { type: "string", enum: ["Running", "Paused"] },
                    /** set when the sandbox runs on a claimed warm pod; otherwise the pod is named after the sandbox */
                    podName: str,
                    /** when the manager accepted it (RFC 3339, ms precision; creationTimestamp has 1 s) */
                    createdAt: str,
                    /** reserved resources, so the admission budget can be rebuilt from the records */
                    resources: {
                      type: "object",
                      properties: {
                        cpuRequestMillis: { type: "integer" },
                        cpuLimitMillis: { type: "integer" },
                        memoryRequestBytes: { type: "integer" },
                        memoryLimitBytes: { type: "integer" },
                        workspaceBytes: { type: "integer" },
                        tmpBytes: { type: "integer" },
                        pids: { type: "integer" },
                      },
                    },
                    autoPause: { type: "object", "x-kubernetes-preserve-unknown-fields": true },
                  },
                },
                status: {
                  type: "object",
                  properties: {
                    phase: str,
                    reason: str,
                    message: str,
                    podName: str,
                    node: str,
                    readyAt: str,
                    lastActivityAt: str,
                    exitCode: { type: "integer" },
                    finishedAt: str,
                    warm: { type: "boolean" },
                    credentialsExpiresAt: str,
                    snapshot: {
                      type: "object",
                      properties: { ref: str, digest: str, sizeBytes: { type: "integer" }, createdAt: str },
                    },
                    autoPause: { type: "object", "x-kubernetes-preserve-unknown-fields": true },
                    probes: { type: "object", "x-kubernetes-preserve-unknown-fields": true },
                    nextPauseTime: str,
                    nextResumeTime: str,
                    conditions: {
                      type: "array",
                      items: {
                        type: "object",
                        required: ["type", "status"],
                        properties: { type: str, status: str, reason: str, message: str, lastTransitionTime: str },
                      },
                    },
                  },
                },
              },
            },
          },
        },
      ],
    },
  };
}
