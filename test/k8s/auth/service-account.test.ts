// Kubernetes service-account tokens against the REAL test control plane: the service verifies
// them through the API server's own OIDC discovery (/.well-known/openid-configuration, then
// /openid/v1/jwks), fetched with the API server's CA and the runtime's own service-account token
// (system:service-account-issuer-discovery is bound to every service account by default; anonymous
// requests are refused). An agent's token, requested with our audience through the TokenRequest
// API as the kubelet does for a projected volume, maps to its owner and its namespace as team, on
// our API and through the real E2B SDK's X-API-KEY; a token for the API server's audience is refused.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CoreV1Api } from "@kubernetes/client-node";
import { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildIdentities } from "../../../runtime/auth/identities.ts";
import { systemClock } from "../../../runtime/core/clock.ts";
import { silentLogger } from "../../../runtime/core/log.ts";
import { type Service, startService } from "../../../runtime/server/service.ts";
import { loadKubeConfig } from "../../support/cluster.ts";
import { testTokens } from "../../support/local.ts";
import { prepareTestCluster, type TestCluster, testPlatform } from "../runtime/support.ts";

const SA_ISSUER = "https://kubernetes.default.svc.cluster.local"; // tools/control-plane/plan.ts
const dir = mkdtempSync(join(tmpdir(), "sbx-auth-k8s-"));
const runtimeTokenFile = join(dir, "runtime-token");
const caFile = join(dir, "ca.crt");
let cluster: TestCluster;
let service: Service;
let core: CoreV1Api;

async function tokenFor(name: string, audiences: string[]): Promise<string> {
  const tr = await core.createNamespacedServiceAccountToken({
    name,
    namespace: cluster.ns.runtime,
    body: { spec: { audiences, expirationSeconds: 600 } },
  });
  return tr.status!.token!;
}

beforeAll(async () => {
  const kc = loadKubeConfig();
  const api = kc.getCurrentCluster()!;
  writeFileSync(caFile, api.caData ? Buffer.from(api.caData, "base64") : "");
  if (!api.caData) throw new Error("the test kubeconfig has no inline CA (certificate-authority-data)");
  core = kc.makeApiClient(CoreV1Api);
  cluster = await prepareTestCluster("auth", {
    listen: { host: "127.0.0.1", port: 0 },
    auth: {
      issuers: [
        {
          name: "cluster",
          issuer: SA_ISSUER,
          // the API server as this process reaches it; its discovery names the issuer above
          discoveryUrl: `${api.server.replace(/\/+$/, "")}/.well-known/openid-configuration`,
          audiences: ["sbx"],
          caFile,
          tokenFile: runtimeTokenFile,
          team: { claim: ["kubernetes.io", "namespace"] },
        },
      ],
    },
  });
  for (const name of ["sbx-runtime", "agent"])
    await core.createNamespacedServiceAccount({ namespace: cluster.ns.runtime, body: { metadata: { name } } });
  // the runtime's own token (in a pod: the mounted one), for the API server's audience
  writeFileSync(runtimeTokenFile, await tokenFor("sbx-runtime", []));
  const identities = buildIdentities(cluster.config, testTokens(), {
    now: () => Date.now(),
    logger: silentLogger(),
  });
  service = await startService({
    config: cluster.config,
    tokens: identities,
    logger: silentLogger(),
    clock: systemClock,
    platform: testPlatform(cluster.config, cluster.clients),
    host: "127.0.0.1",
    port: 0,
    reaperIntervalMs: 60_000,
  });
});

afterAll(async () => {
  await service?.close();
  await cluster?.ns.cleanup();
  rmSync(dir, { recursive: true, force: true });
});

const get = (path: string, token: string) =>
  fetch(`${service.url}${path}`, { headers: { authorization: `Bearer ${token}` } });

describe("a service-account token from the test control plane", () => {
  it("with our audience maps to the service account as owner and its namespace as team", async () => {
    const token = await tokenFor("agent", ["sbx"]);
    const res = await get("/v1/whoami", token);
    const body = await res.json();
    expect(res.status, JSON.stringify(body)).toBe(200);
    expect(body).toMatchObject({
      owner: `system:serviceaccount:${cluster.ns.runtime}:agent`,
      team: cluster.ns.runtime,
      via: "cluster",
    });
    expect((await get("/v1/sandboxes", token)).status).toBe(200);
  });

  it("is accepted by the E2B layer as X-API-KEY", async () => {
    const token = await tokenFor("agent", ["sbx"]);
    expect(await Sandbox.list({ apiKey: token, apiUrl: service.url } as never).nextItems()).toEqual([]);
  });

  it("for the API server's audience is refused as wrong_audience, without the token in the answer", async () => {
    const token = await tokenFor("agent", []);
    const res = await get("/v1/whoami", token);
    const text = await res.text();
    expect(res.status).toBe(401);
    expect(JSON.parse(text).error.details.reason).toBe("wrong_audience");
    expect(text).not.toContain(token);
  });
});
