// A DaemonSet on sandbox nodes whose init containers pull every catalog image, so the first
// pull per node (4.75 s for the 222 MB ml image) happens before a sandbox needs it. Pure.
import { SANDBOX_NODE_LABEL, SANDBOX_NODE_TAINT } from "../../runtime/k8s/contract.ts";
import { type K8sObject, partOf, restrictedContainerSecurity, restrictedPodSecurity } from "../shared/k8s.ts";

export const PAUSE_IMAGE = "registry.k8s.io/pause:3.10";

export function renderPrePullDaemonSet(namespace: string, images: string[]): K8sObject {
  const selector = { "app.kubernetes.io/name": "sbx-image-prepull" };
  const tiny = { requests: { cpu: "10m", memory: "16Mi" }, limits: { memory: "32Mi" } };
  return {
    apiVersion: "apps/v1",
    kind: "DaemonSet",
    // images may not be pushed yet on the first deploy: don't block `pulumi up` on the rollout
    metadata: {
      name: "sbx-image-prepull",
      namespace,
      labels: { ...partOf("prepull"), ...selector },
      annotations: { "pulumi.com/skipAwait": "true" },
    },
    spec: {
      selector: { matchLabels: selector },
      updateStrategy: { type: "RollingUpdate", rollingUpdate: { maxUnavailable: "25%" } },
      template: {
        metadata: { labels: { ...partOf("prepull"), ...selector } },
        spec: {
          nodeSelector: { [SANDBOX_NODE_LABEL.key]: SANDBOX_NODE_LABEL.value },
          tolerations: [
            {
              key: SANDBOX_NODE_TAINT.key,
              operator: "Equal",
              value: SANDBOX_NODE_TAINT.value,
              effect: SANDBOX_NODE_TAINT.effect,
            },
          ],
          securityContext: restrictedPodSecurity(),
          automountServiceAccountToken: false,
          initContainers: [...new Set(images)].sort().map((image, i) => ({
            name: `pull-${i}`,
            image,
            imagePullPolicy: "IfNotPresent",
            command: ["true"],
            resources: tiny,
            securityContext: restrictedContainerSecurity(),
          })),
          containers: [
            { name: "pause", image: PAUSE_IMAGE, resources: tiny, securityContext: restrictedContainerSecurity(65535) },
          ],
        },
      },
    },
  };
}
