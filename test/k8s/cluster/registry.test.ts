// The OCI registry the suite starts (Debian's docker-registry) stores blobs and manifests
// through the distribution API and returns them byte for byte.
import { createHash, randomBytes } from "node:crypto";
import { describe, expect, inject, it } from "vitest";

const base = () => inject("registryUrl");
const digestOf = (b: Buffer) => `sha256:${createHash("sha256").update(b).digest("hex")}`;

async function startUpload(repo: string): Promise<string> {
  const res = await fetch(`${base()}/v2/${repo}/blobs/uploads/`, { method: "POST" });
  expect(res.status).toBe(202);
  return new URL(res.headers.get("location")!, base()).toString();
}

function withDigest(location: string, digest: string): string {
  const url = new URL(location);
  url.searchParams.set("digest", digest);
  return url.toString();
}

async function pushMonolithic(repo: string, blob: Buffer): Promise<string> {
  const digest = digestOf(blob);
  const res = await fetch(withDigest(await startUpload(repo), digest), {
    method: "PUT",
    headers: { "content-type": "application/octet-stream" },
    body: blob,
  });
  expect(res.status).toBe(201);
  expect(res.headers.get("docker-content-digest")).toBe(digest);
  return digest;
}

async function pushChunked(repo: string, blob: Buffer, chunk: number): Promise<string> {
  let location = await startUpload(repo);
  for (let off = 0; off < blob.length; off += chunk) {
    const part = blob.subarray(off, off + chunk);
    const res = await fetch(location, {
      method: "PATCH",
      headers: { "content-type": "application/octet-stream", "content-range": `${off}-${off + part.length - 1}` },
      body: part,
    });
    expect(res.status).toBe(202);
    expect(res.headers.get("range")).toBe(`0-${off + part.length - 1}`);
    location = new URL(res.headers.get("location")!, base()).toString();
  }
  const digest = digestOf(blob);
  const done = await fetch(withDigest(location, digest), { method: "PUT" });
  expect(done.status).toBe(201);
  return digest;
}

async function getBlob(repo: string, digest: string): Promise<Buffer> {
  const res = await fetch(`${base()}/v2/${repo}/blobs/${digest}`);
  expect(res.status).toBe(200);
  return Buffer.from(await res.arrayBuffer());
}

describe("OCI registry", () => {
  it("stores a monolithic and a chunked blob and returns them byte for byte", async () => {
    const small = randomBytes(4096);
    const large = randomBytes(3 * 1024 * 1024 + 17);
    const d1 = await pushMonolithic("sbx/test", small);
    const d2 = await pushChunked("sbx/test", large, 1024 * 1024);
    expect((await getBlob("sbx/test", d1)).equals(small)).toBe(true);
    expect((await getBlob("sbx/test", d2)).equals(large)).toBe(true);
    const head = await fetch(`${base()}/v2/sbx/test/blobs/${d2}`, { method: "HEAD" });
    expect(head.headers.get("content-length")).toBe(String(large.length));
  });

  it("rejects a blob whose digest does not match its content", async () => {
    const res = await fetch(withDigest(await startUpload("sbx/test"), digestOf(Buffer.from("other"))), {
      method: "PUT",
      body: Buffer.from("content"),
    });
    expect(res.status).toBe(400);
    expect(await res.text()).toContain("DIGEST_INVALID");
  });

  it("stores an OCI image manifest and returns it byte for byte by tag and by digest", async () => {
    const repo = "sbx/snapshots";
    const config = Buffer.from(
      JSON.stringify({ architecture: "amd64", os: "linux", rootfs: { type: "layers", diff_ids: [] } }),
    );
    const layer = randomBytes(10_000);
    const configDigest = await pushMonolithic(repo, config);
    const layerDigest = await pushChunked(repo, layer, 4096);
    const mediaType = "application/vnd.oci.image.manifest.v1+json";
    // Indentation on purpose: the registry must keep the exact bytes, not re-serialise.
    const manifest = Buffer.from(
      JSON.stringify(
        {
          schemaVersion: 2,
          mediaType,
          config: { mediaType: "application/vnd.oci.image.config.v1+json", digest: configDigest, size: config.length },
          layers: [{ mediaType: "application/vnd.oci.image.layer.v1.tar", digest: layerDigest, size: layer.length }],
          annotations: { "sbx.dev/sandbox": "sb-1" },
        },
        null,
        3,
      ),
    );
    const put = await fetch(`${base()}/v2/${repo}/manifests/sb-1`, {
      method: "PUT",
      headers: { "content-type": mediaType },
      body: manifest,
    });
    expect(put.status).toBe(201);
    const digest = digestOf(manifest);
    expect(put.headers.get("docker-content-digest")).toBe(digest);

    for (const ref of ["sb-1", digest]) {
      const got = await fetch(`${base()}/v2/${repo}/manifests/${ref}`, { headers: { accept: mediaType } });
      expect(got.status).toBe(200);
      expect(got.headers.get("content-type")).toBe(mediaType);
      expect(Buffer.from(await got.arrayBuffer()).equals(manifest)).toBe(true);
    }
    const tags = (await (await fetch(`${base()}/v2/${repo}/tags/list`)).json()) as { tags: string[] };
    expect(tags.tags).toEqual(["sb-1"]);
  });
});
