// Registry login: ECR by host with a fake token source (AWS is not reachable from CI), and
// htpasswd credentials against a real docker-registry that requires them.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ManualClock } from "../../runtime/core/clock.ts";
import { OciClient } from "../../runtime/snapshot/oci.ts";
import { type EcrTokenSource, ecrAuth, ecrRegionOf, registryLoginFor } from "../../runtime/snapshot/registryLogin.ts";
import { startRegistry, type TestRegistry } from "../support/registry.ts";

describe("ecrRegionOf", () => {
  it.each([
    ["123456789012.dkr.ecr.eu-west-1.amazonaws.com", "eu-west-1"],
    ["https://123456789012.dkr.ecr.us-east-2.amazonaws.com/", "us-east-2"],
    ["123456789012.dkr.ecr-fips.us-gov-west-1.amazonaws.com", "us-gov-west-1"],
    ["123456789012.dkr.ecr.cn-north-1.amazonaws.com.cn", "cn-north-1"],
    ["http://127.0.0.1:5000", undefined],
    ["ghcr.io", undefined],
    ["12345.dkr.ecr.eu-west-1.amazonaws.com", undefined],
  ])("%s -> %s", (host, region) => expect(ecrRegionOf(host)).toBe(region));
});

function fakeEcr(tokens: { password: string; expiresAt: Date }[]): EcrTokenSource & { calls: number } {
  const src = {
    calls: 0,
    async send() {
      const t = tokens[Math.min(src.calls++, tokens.length - 1)]!;
      return {
        authorizationData: [
          { authorizationToken: Buffer.from(`AWS:${t.password}`).toString("base64"), expiresAt: t.expiresAt },
        ],
      };
    },
  };
  return src;
}

const basic = (user: string, pw: string) => `Basic ${Buffer.from(`${user}:${pw}`).toString("base64")}`;

describe("ecrAuth", () => {
  it("logs in once, reuses the token until 15 minutes before it expires, then logs in again", async () => {
    const clock = new ManualClock(new Date("2026-11-29T00:00:00Z"));
    const ecr = fakeEcr([
      { password: "first", expiresAt: new Date("2026-11-29T12:00:00Z") },
      { password: "second", expiresAt: new Date("2026-11-30T00:00:00Z") },
    ]);
    const auth = ecrAuth({ region: "eu-west-1", clock, client: ecr });
    const ch = { scheme: "basic", params: { realm: "ecr" } };
    const both = await Promise.all([auth.authorize(ch), auth.authorize(ch)]);
    expect(both).toEqual([basic("AWS", "first"), basic("AWS", "first")]);
    expect(ecr.calls).toBe(1); // concurrent pushes share one login
    await clock.advance((11 * 60 + 44) * 60_000); // 11:44, 16 minutes before expiry
    expect(await auth.authorize(ch)).toBe(basic("AWS", "first"));
    await clock.advance(2 * 60_000); // 11:46, 14 minutes before expiry
    expect(await auth.authorize(ch)).toBe(basic("AWS", "second"));
    expect(ecr.calls).toBe(2);
  });

  it("names the missing permission when AWS refuses", async () => {
    const auth = ecrAuth({
      region: "eu-west-1",
      clock: new ManualClock(new Date()),
      client: { send: async () => Promise.reject(new Error("AccessDeniedException: not authorized")) },
    });
    await expect(auth.authorize({ scheme: "basic", params: {} })).rejects.toThrow(
      /ECR login in eu-west-1 failed: AccessDeniedException.*ecr:GetAuthorizationToken/,
    );
  });

  it("is what registryLoginFor picks for an ECR host", async () => {
    const ecr = fakeEcr([{ password: "tok", expiresAt: new Date(Date.now() + 3600_000) }]);
    const auth = registryLoginFor(
      { registry: "123456789012.dkr.ecr.eu-west-1.amazonaws.com", repository: "p/snapshots", retentionDays: 7 },
      { clock: new ManualClock(new Date()), ecrClient: ecr },
    );
    expect(await auth!.authorize({ scheme: "basic", params: {} })).toBe(basic("AWS", "tok"));
    expect(
      registryLoginFor(
        { registry: "http://127.0.0.1:5000", repository: "r", retentionDays: 7 },
        { clock: new ManualClock(new Date()) },
      ),
    ).toBeUndefined();
  });
});

// bcrypt of "s3cret" (cost 10); docker-registry only reads bcrypt htpasswd entries
const HTPASSWD = "sbx:$2b$10$.Y7zZOVoTtt3oEm/ga3dVeUuDtcoFyl7phlc9Sdc8xz3mDyXqZZxW\n";

describe("htpasswd login against a real docker-registry", () => {
  let registry: TestRegistry;
  let dir: string;
  beforeAll(async () => {
    registry = await startRegistry({ htpasswd: HTPASSWD });
    dir = mkdtempSync(join(tmpdir(), "sbx-login-"));
  });
  afterAll(async () => {
    await registry?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const login = (password: string) => {
    const file = join(dir, `pw-${password}`);
    writeFileSync(file, `${password}\n`);
    return registryLoginFor(
      { registry: registry.url, repository: "r", retentionDays: 7, auth: { username: "sbx", passwordFile: file } },
      { clock: new ManualClock(new Date()) },
    );
  };

  it("pushes and pulls with the password from the file, and is refused without it", async () => {
    const oci = new OciClient({ registry: registry.url, auth: login("s3cret") });
    const data = Buffer.from("snapshot bytes behind a login");
    const blob = await oci.pushBlob("sbx-snapshots", Readable.from([data]));
    const back: Buffer[] = [];
    for await (const c of await oci.pullBlob("sbx-snapshots", blob.digest, { size: blob.size }))
      back.push(Buffer.from(c));
    expect(Buffer.concat(back).equals(data)).toBe(true);

    await expect(new OciClient({ registry: registry.url }).blobExists("sbx-snapshots", blob.digest)).rejects.toThrow(
      /401/,
    );
    await expect(
      new OciClient({ registry: registry.url, auth: login("wrong") }).blobExists("sbx-snapshots", blob.digest),
    ).rejects.toThrow(/401/);
  });

  it("names the field and the fix when the password file is missing", () => {
    expect(() =>
      registryLoginFor(
        {
          registry: registry.url,
          repository: "r",
          retentionDays: 7,
          auth: { username: "sbx", passwordFile: join(dir, "nope") },
        },
        { clock: new ManualClock(new Date()) },
      ),
    ).toThrow(/config\.snapshots\.auth\.passwordFile.*cannot be read \(ENOENT\).*mount the registry password/);
  });
});
