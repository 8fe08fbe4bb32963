// A warm claim's two paths, measured apart on the test control plane: without credentials the
// claim is an in-memory decision (its pod patch is written behind); with config.credentials the
// credentials must be inside before the claim returns, so it waits for the patch and for the
// delivery (STS AssumeRole against a fake STS on loopback, then an exec writing the file).
// Claims run one at a time, so the numbers are the path's own latency, not queueing.
//   npx tsx bench/k8s/replicaClaimCredentials.ts [--claims 10]
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { performance } from "node:perf_hooks";
import { STSClient } from "@aws-sdk/client-sts";
import { systemClock } from "../../runtime/core/clock.ts";
import { silentLogger } from "../../runtime/core/log.ts";
import type { SandboxSpec } from "../../runtime/core/types.ts";
import { createStsCredentialBroker } from "../../runtime/k8s/credentials.ts";
import { createKubernetesBackend } from "../../runtime/kubernetes.ts";
import { adminClients, freshNamespaces, installSandboxCrd, testConfig } from "../../tools/control-plane/fixtures.ts";
import { kubeconfig } from "../../tools/control-plane/standalone.ts";
import { arg, stats, table } from "./env.ts";

const claims = Number(arg("claims", "10"));
const sts = createServer((req, res) => {
  req.resume();
  req.on("end", () => {
    res.writeHead(200, { "content-type": "text/xml" });
    res.end(
      `<AssumeRoleResponse><AssumeRoleResult><Credentials><AccessKeyId>ASIAX</AccessKeyId><SecretAccessKey>s</SecretAccessKey><SessionToken>t</SessionToken><Expiration>${new Date(Date.now() + 900_000).toISOString()}</Expiration></Credentials></AssumeRoleResult></AssumeRoleResponse>`,
    );
  });
});
await new Promise<void>((r) => sts.listen(0, "127.0.0.1", r));
const endpoint = `http://127.0.0.1:${(sts.address() as AddressInfo).port}`;
const cp = await kubeconfig();
const clients = adminClients(cp.path);
await installSandboxCrd(clients.kc);
const credentials = { baseRoleArn: "arn:aws:iam::123456789012:role/sbx-base", bucket: "sbx-data", region: "us-east-1" };

async function measure(withCredentials: boolean): Promise<number[]> {
  const ns = await freshNamespaces(clients.core, withCredentials ? "bcc-creds" : "bcc-plain");
  const config = testConfig(ns, {
    ...(withCredentials ? { credentials } : {}),
    warmPool: [{ profile: "base", size: "nano", count: claims }],
  });
  const broker = withCredentials
    ? createStsCredentialBroker(
        config.credentials!,
        new STSClient({ region: "us-east-1", endpoint, credentials: { accessKeyId: "AKIAX", secretAccessKey: "x" } }),
      )
    : undefined;
  const backend = createKubernetesBackend(
    config,
    { logger: silentLogger(), clock: systemClock },
    { clients, retryPeriodMs: 1000, leaseDurationMs: 15_000, activityFlushMs: 500, ...(broker ? { broker } : {}) },
  );
  await backend.start();
  const lat: number[] = [];
  try {
    for (let i = 0; i < 1200 && (await backend.poolStatus!())[0].ready < claims; i++)
      await new Promise((r) => setTimeout(r, 100));
    for (let i = 0; i < claims; i++) {
      const spec: SandboxSpec = {
        id: `bcc-${withCredentials ? "c" : "p"}-${i}`,
        owner: "bench",
        image: { profile: "base", image: config.catalog.base },
        size: config.sizeClasses.nano,
        env: {},
        ttlSeconds: 600,
        idleTimeoutSeconds: 0,
        metadata: {},
        createdAt: new Date(),
      };
      const t0 = performance.now();
      const sb = await backend.claim(spec);
      if (sb) lat.push(performance.now() - t0);
    }
  } finally {
    await backend.close();
    await ns.cleanup();
  }
  return lat;
}

try {
  const rows = [
    { path: "in-memory (no credentials)", ...stats(await measure(false)) },
    { path: "credentials (patch + delivery)", ...stats(await measure(true)) },
  ];
  console.log(JSON.stringify({ bench: "k8s-claim-credentials", claims, rows }, null, 2));
  console.log(table(rows.map((r) => ({ path: r.path, warm: r.n, "p50 ms": r.p50, "p99 ms": r.p99, "max ms": r.max }))));
} finally {
  sts.close();
  await cp.stop();
}
process.exit(0);
