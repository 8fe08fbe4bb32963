// A warm claim's two paths, measured apart on the test control plane: without credentials the
// claim is an in-memory decision (its pod patch is written behind); with config.credentials the
// credentials must be inside before the claim returns, so it waits for the patch and for the
// delivery (STS AssumeRole against a fake STS on loopback, then the file written into the pod).
// With warm pods' channels primed (the default) the file goes over the pod's open channel; with
// --primeWarm 0 in the same run (the baseline) over one websocket exec. Each path also times the
// claim's first command (`true`) after it returned: what a primed channel saves there too.
// Claims run one at a time, each once the pool refilled and its channels opened, so the numbers
// are the path's own latency, not queueing behind the previous claim's refill.
//   npx tsx bench/k8s/replicaClaimCredentials.ts [--claims 10]
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { performance } from "node:perf_hooks";
import { STSClient } from "@aws-sdk/client-sts";
import { systemClock } from "../../runtime/core/clock.ts";
import { silentLogger } from "../../runtime/core/log.ts";
import type { SandboxSpec } from "../../runtime/core/types.ts";
import { createStsCredentialBroker } from "../../runtime/k8s/credentials.ts";
import { createKubernetesPlatform } from "../../runtime/kubernetes.ts";
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

interface PathRun {
  claim: number[];
  firstCommand: number[];
}

async function measure(withCredentials: boolean, primeWarm: number): Promise<PathRun> {
  const ns = await freshNamespaces(clients.core, `bcc-${withCredentials ? "creds" : "plain"}-${primeWarm}`);
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
  const platform = createKubernetesPlatform(
    config,
    { logger: silentLogger(), clock: systemClock },
    {
      clients,
      retryPeriodMs: 1000,
      leaseDurationMs: 15_000,
      activityFlushMs: 500,
      commandChannel: { primeWarm },
      ...(broker ? { broker } : {}),
    },
  );
  const { backend } = platform;
  await backend.start();
  const run: PathRun = { claim: [], firstCommand: [] };
  const pool = platform.testing.channels.pool;
  const primed = () => pool.keys().filter((k) => k.startsWith("warm:") && pool.current(k)).length;
  // Before each claim: the pool refilled and (primed paths) its channels open, then a pause for
  // that background work to quiet, so each claim measures its own path, not the last one's refill
  const settle = async () => {
    for (let i = 0; i < 1200 && (await backend.poolStatus!())[0].ready < claims; i++)
      await new Promise((r) => setTimeout(r, 100));
    for (let i = 0; i < 1200 && primeWarm > 0 && primed() < Math.min(claims, primeWarm); i++)
      await new Promise((r) => setTimeout(r, 100));
    await new Promise((r) => setTimeout(r, 300));
  };
  try {
    for (let i = 0; i < claims; i++) {
      const spec: SandboxSpec = {
        id: `bcc-${withCredentials ? "c" : "p"}${primeWarm}-${i}`,
        owner: "bench",
        image: { profile: "base", image: config.catalog.base },
        size: config.sizeClasses.nano,
        env: {},
        ttlSeconds: 600,
        idleTimeoutSeconds: 0,
        metadata: {},
        createdAt: new Date(),
      };
      await settle();
      const t0 = performance.now();
      const sb = await backend.claim(spec);
      if (!sb) continue;
      const t1 = performance.now();
      const session = await backend.exec(spec.id, { command: ["true"] });
      session.stdout.resume();
      session.stderr.resume();
      if ((await session.result).exitCode !== 0) throw new Error(`true exited non-zero in ${spec.id}`);
      run.claim.push(t1 - t0);
      run.firstCommand.push(performance.now() - t1);
    }
  } finally {
    await backend.close();
    await ns.cleanup();
  }
  return run;
}

try {
  const paths: { path: string; credentials: boolean; primeWarm: number }[] = [
    { path: "in memory (no credentials), primed", credentials: false, primeWarm: 64 },
    { path: "in memory (no credentials), not primed", credentials: false, primeWarm: 0 },
    { path: "credentials over the primed channel", credentials: true, primeWarm: 64 },
    { path: "credentials over a websocket exec (baseline)", credentials: true, primeWarm: 0 },
  ];
  const rows = [];
  for (const p of paths) {
    const run = await measure(p.credentials, p.primeWarm);
    rows.push({ path: p.path, claim: stats(run.claim), firstCommand: stats(run.firstCommand) });
  }
  console.log(JSON.stringify({ bench: "k8s-claim-credentials", claims, rows }, null, 2));
  console.log(
    table(
      rows.map((r) => ({
        path: r.path,
        warm: r.claim.n,
        "claim p50 ms": r.claim.p50,
        "claim p99 ms": r.claim.p99,
        "1st cmd p50 ms": r.firstCommand.p50,
        "1st cmd p99 ms": r.firstCommand.p99,
      })),
    ),
  );
} finally {
  sts.close();
  await cp.stop();
}
process.exit(0);
