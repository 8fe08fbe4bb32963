// The runtime as its registry's token issuer (runtime/snapshot/registryToken.ts), against a real
// docker-registry in `auth: token` mode with the issuer's certificate as its bundle: the
// replica's own login reaches the snapshot repository and mounts across it; a sandbox's token
// reaches its own repository and nothing else; a token signed by another key, or expired, is
// refused; a bad key pair is named by its field; and `sbx registry-token-key` makes a pair that
// loads, never over an existing one.
import { X509Certificate } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable, Writable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runCli } from "../../runtime/cli/main.ts";
import { tokenAuthConfig } from "../../runtime/config/schema.ts";
import { ManualClock } from "../../runtime/core/clock.ts";
import { OciClient } from "../../runtime/snapshot/oci.ts";
import { registryLoginFor } from "../../runtime/snapshot/registryLogin.ts";
import {
  issuerAuth,
  loadTokenIssuer,
  sandboxToken,
  tokenIssuer,
  tokenKeyPair,
} from "../../runtime/snapshot/registryToken.ts";
import { startRegistry, type TestRegistry } from "../support/registry.ts";

const REPO = "sbx-snapshots";
const A = "sbx-aaaaaaaaaaaaaaaa";
const B = "sbx-bbbbbbbbbbbbbbbb";
const pair = tokenKeyPair({ now: new Date() });
const names = { issuer: "sbx", service: "sbx-registry" };
const clock = new ManualClock(new Date());
const issuer = tokenIssuer({ ...pair, ...names, ttlSeconds: 900, clock });

let registry: TestRegistry;
let dir: string;
let replica: OciClient;
const clients: OciClient[] = [];

beforeAll(async () => {
  registry = await startRegistry({ token: { certPem: pair.certPem, ...names } });
  dir = mkdtempSync(join(tmpdir(), "sbx-token-"));
  replica = new OciClient({ registry: registry.url, auth: issuerAuth(issuer, REPO) });
  clients.push(replica);
});

afterAll(async () => {
  for (const c of clients) c.close();
  await registry?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** what a pod's helper does with its Authorization line: one request, its status */
async function status(method: string, path: string, authorization?: string, body?: Buffer): Promise<number> {
  const res = await fetch(`${registry.url}${path}`, {
    method,
    headers: authorization ? { authorization } : {},
    ...(body ? { body } : {}),
  });
  await res.arrayBuffer();
  return res.status;
}

/** a blob the way a pod pushes it: POST an upload, PUT the bytes with their digest */
async function podPush(repo: string, authorization: string, data: Buffer): Promise<number> {
  const start = await fetch(`${registry.url}/v2/${repo}/blobs/uploads/`, {
    method: "POST",
    headers: { authorization },
  });
  await start.arrayBuffer();
  if (start.status !== 202) return start.status;
  const url = new URL(start.headers.get("location")!, registry.url);
  const { createHash } = await import("node:crypto");
  url.searchParams.set("digest", `sha256:${createHash("sha256").update(data).digest("hex")}`);
  const put = await fetch(url, { method: "PUT", headers: { authorization }, body: data });
  await put.arrayBuffer();
  return put.status;
}

describe("the replica's own tokens", () => {
  it("push and pull the snapshot repository, and mount a sandbox's blob into it", async () => {
    const data = Buffer.from("a layer the pod pushed");
    const blob = await replica.pushBlob(`${REPO}/${A}`, Readable.from([data]));
    expect(await replica.mountBlob(REPO, `${REPO}/${A}`, blob.digest)).toBe(true);
    const back: Buffer[] = [];
    for await (const c of await replica.pullBlob(REPO, blob.digest, { size: blob.size })) back.push(Buffer.from(c));
    expect(Buffer.concat(back).equals(data)).toBe(true);
    // a digest the sandbox's repository lacks is not mounted (the upload it opened is cancelled)
    expect(await replica.mountBlob(REPO, `${REPO}/${B}`, blob.digest)).toBe(false);
  });

  it("reach nothing outside the snapshot repository", async () => {
    await expect(replica.blobExists("other-team", `sha256:${"0".repeat(64)}`)).rejects.toThrow(/401/);
  });

  it("are what registryLoginFor picks for snapshots.tokenAuth", async () => {
    writeFileSync(join(dir, "key.pem"), pair.keyPem);
    writeFileSync(join(dir, "cert.pem"), pair.certPem);
    const auth = registryLoginFor(
      {
        registry: registry.url,
        repository: REPO,
        retentionDays: 7,
        tokenAuth: { keyFile: join(dir, "key.pem"), certFile: join(dir, "cert.pem"), ...names, ttlSeconds: 900 },
      },
      { clock },
    );
    const oci = new OciClient({ registry: registry.url, auth });
    clients.push(oci);
    const blob = await oci.pushSmallBlob(REPO, Buffer.from("config"));
    expect(await oci.blobExists(REPO, blob.digest)).toBe(true);
  });
});

describe("a sandbox's token", () => {
  it("pushes and pulls its own repository and nothing else", async () => {
    const mine = sandboxToken(issuer, REPO, A);
    const data = Buffer.from("sandbox A's files");
    expect(await podPush(`${REPO}/${A}`, mine, data)).toBe(201);
    const theirs = await replica.pushBlob(`${REPO}/${B}`, Readable.from([Buffer.from("sandbox B's files")]));
    await replica.mountBlob(REPO, `${REPO}/${B}`, theirs.digest);

    // B's layer, by its digest: not from the snapshot repository, not from B's, not mounted
    expect(await status("GET", `/v2/${REPO}/blobs/${theirs.digest}`, mine)).toBe(401);
    expect(await status("GET", `/v2/${REPO}/${B}/blobs/${theirs.digest}`, mine)).toBe(401);
    expect(await status("POST", `/v2/${REPO}/${A}/blobs/uploads/?mount=${theirs.digest}&from=${REPO}/${B}`, mine)).toBe(
      401,
    );
    // nor list, overwrite or delete what the snapshot repository holds
    expect(await status("GET", `/v2/${REPO}/tags/list`, mine)).toBe(401);
    expect(await podPush(REPO, mine, data)).toBe(401);
    expect(await status("DELETE", `/v2/${REPO}/blobs/${theirs.digest}`, mine)).toBe(401);
    // and no token at all reaches anything
    expect(await status("GET", `/v2/${REPO}/${A}/blobs/${theirs.digest}`)).toBe(401);
  });

  it("signed by another key, or expired, is refused", async () => {
    const stranger = tokenIssuer({ ...tokenKeyPair({ now: new Date() }), ...names, ttlSeconds: 900, clock });
    expect(await podPush(`${REPO}/${A}`, sandboxToken(stranger, REPO, A), Buffer.from("x"))).toBe(401);
    const past = new ManualClock(new Date(Date.now() - 2 * 3600_000));
    const old = tokenIssuer({ ...pair, ...names, ttlSeconds: 900, clock: past });
    expect(await podPush(`${REPO}/${A}`, sandboxToken(old, REPO, A), Buffer.from("x"))).toBe(401);
    const otherService = tokenIssuer({ ...pair, issuer: "sbx", service: "elsewhere", ttlSeconds: 900, clock });
    expect(await podPush(`${REPO}/${A}`, sandboxToken(otherService, REPO, A), Buffer.from("x"))).toBe(401);
  });
});

describe("loadTokenIssuer", () => {
  const cfg = (keyFile: string, certFile: string) => ({ keyFile, certFile, ...names, ttlSeconds: 900 });

  it("names the field and the fix for a missing file, a wrong key type, and a cert of another key", async () => {
    const { generateKeyPairSync } = await import("node:crypto");
    writeFileSync(join(dir, "k.pem"), pair.keyPem);
    writeFileSync(join(dir, "c.pem"), pair.certPem);
    writeFileSync(join(dir, "other.pem"), tokenKeyPair({ now: new Date() }).certPem);
    const rsa = generateKeyPairSync("rsa", { modulusLength: 2048 }).privateKey.export({ type: "pkcs8", format: "pem" });
    writeFileSync(join(dir, "rsa.pem"), rsa);
    expect(() => loadTokenIssuer(cfg(join(dir, "none"), join(dir, "c.pem")), clock)).toThrow(
      /config\.snapshots\.tokenAuth\.keyFile.*cannot be read \(ENOENT\)/,
    );
    expect(() => loadTokenIssuer(cfg(join(dir, "rsa.pem"), join(dir, "c.pem")), clock)).toThrow(
      /tokenAuth\.keyFile.*must be an EC P-256 key/,
    );
    expect(() => loadTokenIssuer(cfg(join(dir, "k.pem"), join(dir, "other.pem")), clock)).toThrow(
      /tokenAuth\.certFile.*is not the certificate of keyFile's key/,
    );
    expect(() => loadTokenIssuer(cfg(join(dir, "k.pem"), join(dir, "k.pem")), clock)).toThrow(
      /tokenAuth\.certFile.*is not a PEM certificate/,
    );
    expect(loadTokenIssuer(cfg(join(dir, "k.pem"), join(dir, "c.pem")), clock).ttlSeconds).toBe(900);
  });
});

describe("tokenKeyPair", () => {
  it("makes a certificate that parses every time (its serial is a minimal DER integer)", () => {
    // one pair in 256 had a serial of 0x00 then a byte below 0x80, which X509Certificate refuses
    for (let i = 0; i < 1500; i++) {
      const { certPem } = tokenKeyPair({ now: new Date(0) });
      expect(() => new X509Certificate(certPem), `pair ${i}`).not.toThrow();
    }
  });
});

describe("sbx registry-token-key", () => {
  const cli = async (argv: string[]) => {
    let out = "";
    let err = "";
    const sink = (add: (s: string) => void) =>
      new Writable({
        write: (c, _e, cb) => {
          add(c.toString());
          cb();
        },
      });
    const code = await runCli(argv, {
      env: {},
      io: { stdout: sink((s) => (out += s)), stderr: sink((s) => (err += s)), stdin: process.stdin },
    });
    return { code, out, err };
  };

  it("writes a key only its owner reads and the certificate the registry trusts, and keeps an existing pair", async () => {
    const d = join(dir, "pair");
    const made = await cli(["registry-token-key", "--dir", d, "--json"]);
    expect(made.code).toBe(0);
    const files = JSON.parse(made.out) as { keyFile: string; certFile: string };
    expect(statSync(files.keyFile).mode & 0o777).toBe(0o600);
    const loaded = loadTokenIssuer({ ...files, ...names, ttlSeconds: 900 }, clock);
    expect(sandboxToken(loaded, REPO, A)).toMatch(/^Bearer /);

    const key = readFileSync(files.keyFile, "utf8");
    const again = await cli(["registry-token-key", "--dir", d]);
    expect(again.code).toBe(2);
    expect(again.err).toMatch(/--dir.*key\.pem already exists; choose an empty directory/);
    expect(readFileSync(files.keyFile, "utf8")).toBe(key);
    expect((await cli(["registry-token-key", "--dir", d, "--days", "0"])).err).toMatch(/--days.*whole days/);
  });

  it("prints the registry's auth section the test registries run with, and the stack's commands", async () => {
    const d = join(dir, "printed");
    const made = await cli(["registry-token-key", "--dir", d, "--service", "regs"]);
    expect(made.code).toBe(0);
    const certFile = join(d, "cert.pem");
    const keyFile = join(d, "key.pem");
    // the very section startLocalRegistry and the control plane configure (and this file's
    // registry proves tokens pass with it), with the names given
    for (const line of tokenAuthConfig({ issuer: "sbx", service: "regs" }, certFile))
      expect(made.out).toContain(`  ${line}\n`);
    expect(made.out).toContain(`pulumi config set --path sbx:snapshots.registryToken.certificate < ${certFile}\n`);
    expect(made.out).toContain(`pulumi config set --secret sbx:registryTokenKey < ${keyFile}\n`);
    expect(made.out).toContain('pulumi config set --path sbx:snapshots.registryToken.service "regs"\n');
    expect(made.out).not.toContain("registryToken.issuer");
    expect(made.out).not.toContain(readFileSync(keyFile, "utf8").split("\n")[1]);
    const bad = await cli(["registry-token-key", "--dir", join(dir, "bad"), "--issuer", "two words"]);
    expect(bad.code).toBe(2);
    expect(bad.err).toMatch(/--issuer.*"two words".*no spaces/);
  });
});
