// Claim-time and create-time credential delivery through the real API server: the STS
// broker (the real AWS SDK client, pointed at a fake STS endpoint on loopback because AWS is
// unreachable here) mints per-sandbox credentials, they are written into the sandbox through
// exec, never appear in the pod spec, and a sandbox is ready only once they are inside. A warm
// claim writes them over the channel primed into the warm pod before the claim.
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { STSClient } from "@aws-sdk/client-sts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { RuntimeConfig } from "../../../runtime/config/schema.ts";
import type { SandboxSpec } from "../../../runtime/core/types.ts";
import type { KubernetesPlatform } from "../../../runtime/k8s/assemble.ts";
import type { KubernetesBackend } from "../../../runtime/k8s/backend.ts";
import type { KubeClients } from "../../../runtime/k8s/client.ts";
import { createStsCredentialBroker } from "../../../runtime/k8s/credentials.ts";
import { waitFor } from "../../support/cluster.ts";
import {
  adminClients,
  freshNamespaces,
  installSandboxCrd,
  type TestNamespaces,
  testConfig,
  testKubeconfigPath,
  testPlatform,
} from "./support.ts";

let sts: Server;
const policies = new Map<string, string>();
let clients: KubeClients;
let ns: TestNamespaces;
let config: RuntimeConfig;
let backend: KubernetesBackend;
let platform: KubernetesPlatform;

beforeAll(async () => {
  sts = createServer((req, res) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      const p = new URLSearchParams(body);
      policies.set(p.get("RoleSessionName")!, p.get("Policy")!);
      res.writeHead(200, { "content-type": "text/xml" });
      res.end(
        `<AssumeRoleResponse><AssumeRoleResult><Credentials><AccessKeyId>ASIA-${p.get("RoleSessionName")}</AccessKeyId><SecretAccessKey>s</SecretAccessKey><SessionToken>tok-${p.get("RoleSessionName")}</SessionToken><Expiration>${new Date(Date.now() + 900_000).toISOString()}</Expiration></Credentials></AssumeRoleResult></AssumeRoleResponse>`,
      );
    });
  });
  await new Promise<void>((r) => sts.listen(0, "127.0.0.1", r));
  const endpoint = `http://127.0.0.1:${(sts.address() as AddressInfo).port}`;
  clients = adminClients(await testKubeconfigPath());
  await installSandboxCrd(clients.kc);
  ns = await freshNamespaces(clients.core, "rt-creds");
  const credentials = {
    baseRoleArn: "arn:aws:iam::123456789012:role/sbx-base",
    bucket: "sbx-data",
    region: "us-east-1",
    durationSeconds: 900,
  };
  config = testConfig(ns, { credentials, warmPool: [{ profile: "base", size: "nano", count: 1 }] });
  const broker = createStsCredentialBroker(
    credentials,
    new STSClient({ region: "us-east-1", endpoint, credentials: { accessKeyId: "AKIAMANAGER", secretAccessKey: "x" } }),
  );
  platform = testPlatform(config, clients, { broker });
  backend = platform.backend;
  await backend.start();
  await waitFor("leader", async () => platform.testing.controller.isLeader(), 15_000);
});

afterAll(async () => {
  await backend?.close();
  await ns?.cleanup();
  await new Promise<void>((r) => sts.close(() => r()));
});

const spec = (id: string): SandboxSpec => ({
  id,
  owner: "carol",
  image: { profile: "base", image: config.catalog.base },
  size: config.sizeClasses.nano,
  env: {},
  ttlSeconds: 600,
  idleTimeoutSeconds: 0,
  metadata: {},
  createdAt: new Date(),
});

async function readInside(id: string): Promise<string> {
  const s = await backend.exec(id, {
    command: ["sh", "-c", 'cat "$AWS_SHARED_CREDENTIALS_FILE"; echo "prefix=$SBX_PREFIX"'],
  });
  const out: Buffer[] = [];
  s.stdout.on("data", (c: Buffer) => out.push(c));
  expect((await s.result).exitCode).toBe(0);
  return Buffer.concat(out).toString();
}

describe("credential delivery", () => {
  it("cold sandbox: delivered by the reconciler before it reports ready", async () => {
    await backend.provision(spec("cred-cold"));
    const ready = await backend.awaitReady("cred-cold", { timeoutMs: 60_000 });
    expect(ready.ready).toBe(true);
    const inside = await readInside("cred-cold");
    expect(inside).toContain("aws_session_token = tok-sbx-cred-cold");
    expect(inside).toContain("prefix=sandboxes/cred-cold/");
    expect(JSON.parse(policies.get("sbx-cred-cold")!).Statement[0].Resource).toBe(
      "arn:aws:s3:::sbx-data/sandboxes/cred-cold/*",
    );
    const pod = await clients.core.readNamespacedPod({ name: "cred-cold", namespace: ns.sandboxes });
    expect(JSON.stringify(pod)).not.toContain("tok-sbx-cred-cold");
  });

  it("warm sandbox: delivered at claim time, so the claimed pod is ready with its own credentials", async () => {
    await waitFor("warm pod", async () => (await backend.poolStatus!())[0].ready === 1, 60_000);
    // the warm pod's channel is open before the claim, and the claim writes the credentials over it
    const primedKey = () => platform.testing.channels.pool.keys().find((k) => k.startsWith("warm:"));
    await waitFor(
      "primed channel",
      async () => !!primedKey() && !!platform.testing.channels.pool.current(primedKey()!),
      60_000,
    );
    const primed = platform.testing.channels.pool.current(primedKey()!)!;
    const sb = await backend.claim(spec("cred-warm"));
    expect(sb).toMatchObject({ ready: true, warm: true });
    expect(platform.testing.channels.pool.current("cred-warm"), "the claim used the primed channel").toBe(primed);
    expect(primedKey()).toBeUndefined();
    const inside = await readInside("cred-warm");
    expect(inside).toContain("aws_session_token = tok-sbx-cred-warm");
    expect(inside).not.toContain("cred-cold");
    await waitFor(
      "record written",
      async () =>
        !!(await clients.custom
          .getNamespacedCustomObject({
            group: "sbx.dev",
            version: "v1alpha1",
            namespace: ns.sandboxes,
            plural: "sandboxes",
            name: "cred-warm",
          })
          .catch(() => undefined)),
    );
    const cr = await clients.custom.getNamespacedCustomObject({
      group: "sbx.dev",
      version: "v1alpha1",
      namespace: ns.sandboxes,
      plural: "sandboxes",
      name: "cred-warm",
    });
    expect(cr.spec.podName).toMatch(/^warm-base-nano-/);
    expect(cr.metadata.annotations["sbx.dev/credentials-expires-at"]).toBeTruthy();
    const pod = await clients.core.readNamespacedPod({ name: cr.spec.podName, namespace: ns.sandboxes });
    expect(JSON.stringify(pod)).not.toContain("tok-sbx-cred-warm");
  });
});
