// The test control plane's registry in `auth: token` mode, as the tests that check where pods
// put their snapshot layers read it (tools/control-plane/plan.ts tokenRegistryConfig).
import { readFileSync } from "node:fs";
import { expect } from "vitest";
import { systemClock } from "../../runtime/core/clock.ts";
import { OciClient } from "../../runtime/snapshot/oci.ts";
import type { SnapshotInfo } from "../../runtime/snapshot/record.ts";
import { issuerAuth, sandboxRepository, tokenIssuer } from "../../runtime/snapshot/registryToken.ts";
import { tokenRegistry } from "./cluster.ts";

/**
 * Each layer of sandbox `id`'s snapshot is in the sandbox's own repository (`<repository>/<id>`,
 * where only the pod's path puts it) and mounted into the snapshot repository, and neither is
 * readable without a token. Read with a replica's login, signed with the boot's key pair, at
 * `registryUrl` (default: the boot's token registry; any registry that trusts the boot's pair).
 */
export async function expectLayersInSandboxRepository(
  snapshot: SnapshotInfo | undefined,
  id: string,
  registryUrl = tokenRegistry().url,
): Promise<void> {
  expect(snapshot?.layers.length).toBeGreaterThan(0);
  const tr = tokenRegistry();
  const issuer = tokenIssuer({
    keyPem: readFileSync(tr.keyFile, "utf8"),
    certPem: readFileSync(tr.certFile, "utf8"),
    issuer: tr.issuer,
    service: tr.service,
    ttlSeconds: 900,
    clock: systemClock,
  });
  const { repository, layers } = snapshot!;
  const replica = new OciClient({ registry: registryUrl, auth: issuerAuth(issuer, repository) });
  try {
    for (const layer of layers) {
      expect(await replica.blobExists(sandboxRepository(repository, id), layer.digest)).toBe(true);
      expect(await replica.blobExists(repository, layer.digest)).toBe(true);
      expect((await fetch(`${registryUrl}/v2/${repository}/blobs/${layer.digest}`)).status).toBe(401);
    }
  } finally {
    replica.close();
  }
}
