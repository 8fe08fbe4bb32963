// A small OCI distribution client over node:http(s): streaming blob push and pull with
// digests computed on the fly, manifest put/get/head/delete. No dependencies, constant
// memory: a push holds at most two upload chunks (default 16 MiB each), a pull holds nothing.
// The HTTP exchange itself (auth challenges, redirects, error mapping) is registryHttp.ts.
import { createHash } from "node:crypto";
import { finished, type Readable } from "node:stream";
import { UpstreamError } from "../core/errors.ts";
import type { RegistryAuth } from "./auth.ts";
import { DigestMismatchError, sha256Digest, VerifyingStream } from "./digest.ts";
import { RegistryHttp } from "./registryHttp.ts";

export const OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json";

export interface Descriptor {
  mediaType: string;
  digest: string;
  size: number;
  annotations?: Record<string, string>;
}

export interface OciManifest {
  schemaVersion: 2;
  mediaType: typeof OCI_MANIFEST;
  artifactType?: string;
  config: Descriptor;
  layers: Descriptor[];
  annotations?: Record<string, string>;
}

export interface OciClientOptions {
  /** "http://127.0.0.1:5000" or "https://123.dkr.ecr.us-east-1.amazonaws.com"; a bare host means https */
  registry: string;
  /**
   * Where requests go, asked at each call, when that is not `registry` itself (an in-cluster
   * Service reached at one of its ready pods: runtime/k8s/registryEndpoint.ts). References keep
   * `registry`'s host, so they stay valid when that address changes.
   */
  address?: () => string;
  auth?: RegistryAuth;
  /** bytes per PATCH; one chunk is the most a push holds in memory */
  chunkBytes?: number;
  /** retries of one chunk when the registry confirms it received none of it */
  chunkRetries?: number;
}

export interface PushOptions {
  onProgress?: (bytes: number) => void;
  signal?: AbortSignal;
}

export class OciClient {
  readonly base: URL;
  private readonly chunkBytes: number;
  private readonly chunkRetries: number;
  private readonly http: RegistryHttp;

  constructor(opts: OciClientOptions) {
    this.base = new URL(/^https?:\/\//.test(opts.registry) ? opts.registry : `https://${opts.registry}`);
    this.chunkBytes = opts.chunkBytes ?? 16 * 1024 * 1024;
    this.chunkRetries = opts.chunkRetries ?? 2;
    const address = opts.address;
    this.http = new RegistryHttp(this.base, opts.auth, address && (() => new URL(address())));
  }

  close(): void {
    this.http.close();
  }

  /** Streams `source` into a blob of `repo`. Returns its digest and size once the registry committed it. */
  // Over 60 lines on purpose: one upload session's chunk loop, digest and commit, which share the session's location.
  async pushBlob(repo: string, source: Readable, opts: PushOptions = {}): Promise<{ digest: string; size: number }> {
    const start = await this.http.call("POST", `/v2/${repo}/blobs/uploads/`, {}, undefined, [202]);
    start.res.resume();
    let location = this.http.location(start, `start upload to ${repo}`);
    const hash = createHash("sha256");
    // Two chunk buffers: one fills from the source while the other is being PATCHed, so reading
    // out of the sandbox and uploading overlap. Memory: 2 x chunkBytes.
    const buffers = [Buffer.allocUnsafe(this.chunkBytes), Buffer.allocUnsafe(this.chunkBytes)];
    let chunk = buffers[0];
    let filled = 0;
    let offset = 0;
    let inflight: Promise<void> | undefined;
    const flush = async () => {
      if (inflight) await inflight;
      if (filled === 0) return;
      const data = chunk.subarray(0, filled);
      const at = offset;
      offset += filled;
      filled = 0;
      chunk = chunk === buffers[0] ? buffers[1] : buffers[0];
      inflight = this.patchChunk(repo, location, data, at).then((loc) => {
        location = loc;
        opts.onProgress?.(at + data.length);
      });
      // surfaced by the next await; never an unhandled rejection in between
      inflight.catch(() => undefined);
    };
    // Waits for an upload slot only when a chunk is full: the source keeps flowing otherwise.
    const take = (piece: Buffer, from: number): Promise<void> | undefined => {
      for (let at = from; at < piece.length; ) {
        const n = piece.copy(chunk, filled, at);
        filled += n;
        at += n;
        if (filled === chunk.length) return flush().then(() => take(piece, at));
      }
      return undefined;
    };
    try {
      await eachChunk(source, (piece) => {
        opts.signal?.throwIfAborted();
        hash.update(piece);
        return take(piece, 0);
      });
      await flush();
      if (inflight) await inflight;
      const digest = `sha256:${hash.digest("hex")}`;
      const url = new URL(location, this.http.origin());
      url.searchParams.set("digest", digest);
      const done = await this.http.call("PUT", url.pathname + url.search, { "content-length": "0" }, undefined, [201]);
      done.res.resume();
      const got = done.headers["docker-content-digest"];
      if (got && got !== digest)
        throw new DigestMismatchError(
          `blob upload to ${repo}`,
          { digest, size: offset },
          { digest: String(got), size: offset },
        );
      return { digest, size: offset };
    } catch (err) {
      await inflight?.catch(() => undefined);
      await this.http
        .call(
          "DELETE",
          new URL(location, this.http.origin()).pathname + new URL(location, this.http.origin()).search,
          {},
          undefined,
          [204, 404],
        )
        .then(
          (r) => r.res.resume(),
          () => undefined, // best effort: the registry purges abandoned uploads itself
        );
      throw err;
    }
  }

  /**
   * One PATCH with an exact Content-Range. On a transport error or 5xx the upload's status
   * says how much arrived: if none of this chunk did, it is resent; otherwise the upload
   * cannot be resumed (docker-registry refuses an upload URL whose signed state no longer
   * matches the bytes it holds), so this fails; the stranded upload is never committed as a
   * blob and the registry's upload purging reclaims it.
   */
  private async patchChunk(repo: string, location: string, data: Buffer, offset: number): Promise<string> {
    for (let attempt = 0; ; attempt++) {
      const url = new URL(location, this.http.origin());
      try {
        const r = await this.http.call(
          "PATCH",
          url.pathname + url.search,
          {
            "content-type": "application/octet-stream",
            "content-range": `${offset}-${offset + data.length - 1}`,
            "content-length": String(data.length),
          },
          data,
          [202],
        );
        r.res.resume();
        const range = String(r.headers.range ?? "");
        if (range && range !== `0-${offset + data.length - 1}`) {
          throw new UpstreamError(
            `blob upload to ${repo}: registry reports range ${range} after sending bytes 0-${offset + data.length - 1}; retry the pause`,
          );
        }
        return this.http.location(r, `upload chunk to ${repo}`);
      } catch (err) {
        const received = await this.uploadedBytes(location);
        if (attempt < this.chunkRetries && received === offset) continue;
        throw new UpstreamError(
          `blob upload to ${repo} failed at byte ${offset} (registry holds ${received ?? "no upload"}): ${(err as Error).message}; the partial upload was discarded, retry the pause`,
        );
      }
    }
  }

  private async uploadedBytes(location: string): Promise<number | undefined> {
    try {
      const url = new URL(location, this.http.origin());
      const r = await this.http.call("GET", url.pathname + url.search, {}, undefined, [204]);
      r.res.resume();
      // docker-registry reports an empty upload as "0-0" too; treating it as 0 is safe because a
      // resend from the wrong offset is refused (416) and then fails cleanly
      const m = /^0-(\d+)$/.exec(String(r.headers.range ?? ""));
      return m && m[1] !== "0" ? Number(m[1]) + 1 : 0;
    } catch {
      return undefined;
    }
  }

  /** A stream of the blob's bytes that errors at the end if they don't match `digest`/`size`. */
  async pullBlob(
    repo: string,
    digest: string,
    opts: { size?: number; onProgress?: (bytes: number) => void } = {},
  ): Promise<Readable> {
    const r = await this.http.call("GET", `/v2/${repo}/blobs/${digest}`, {}, undefined, [200], {
      followRedirects: true,
      notFound: ["blob", `${repo}@${digest}`],
    });
    const verify = new VerifyingStream(`blob ${repo}@${digest}`, { digest, size: opts.size }, opts.onProgress);
    r.res.on("error", (e) => verify.destroy(e));
    return r.res.pipe(verify);
  }

  async blobExists(repo: string, digest: string): Promise<boolean> {
    const r = await this.http.call("HEAD", `/v2/${repo}/blobs/${digest}`, {}, undefined, [200, 404], {
      followRedirects: true,
    });
    r.res.resume();
    return r.status === 200;
  }

  /**
   * Links a blob `from` another repository into `repo` without moving its bytes (a
   * cross-repository mount). False when `from` has no such blob: the registry then opened an
   * upload instead, which is cancelled.
   */
  async mountBlob(repo: string, from: string, digest: string): Promise<boolean> {
    const q = `mount=${encodeURIComponent(digest)}&from=${encodeURIComponent(from)}`;
    const r = await this.http.call("POST", `/v2/${repo}/blobs/uploads/?${q}`, {}, undefined, [201, 202]);
    r.res.resume();
    if (r.status === 201) return true;
    const upload = new URL(this.http.location(r, `mount into ${repo}`), this.http.origin());
    const cancel = await this.http.call("DELETE", upload.pathname + upload.search, {}, undefined, [204, 404]);
    cancel.res.resume();
    return false;
  }

  /** Small blobs (a snapshot's config) in one request. */
  async pushSmallBlob(repo: string, data: Buffer): Promise<Descriptor & { mediaType: "" }> {
    const digest = sha256Digest(data);
    if (!(await this.blobExists(repo, digest))) {
      const start = await this.http.call("POST", `/v2/${repo}/blobs/uploads/`, {}, undefined, [202]);
      start.res.resume();
      const url = new URL(this.http.location(start, `start upload to ${repo}`), this.http.origin());
      url.searchParams.set("digest", digest);
      const r = await this.http.call(
        "PUT",
        url.pathname + url.search,
        { "content-type": "application/octet-stream", "content-length": String(data.length) },
        data,
        [201],
      );
      r.res.resume();
    }
    return { mediaType: "", digest, size: data.length };
  }

  async getSmallBlob(repo: string, digest: string, maxBytes = 1 << 20): Promise<Buffer> {
    const stream = await this.pullBlob(repo, digest);
    const parts: Buffer[] = [];
    let n = 0;
    for await (const p of stream as AsyncIterable<Buffer>) {
      n += p.length;
      if (n > maxBytes)
        throw new UpstreamError(`blob ${repo}@${digest} is larger than ${maxBytes} bytes: it is not a snapshot config`);
      parts.push(p);
    }
    return Buffer.concat(parts);
  }

  /** Puts the manifest under `tag` and returns its digest (checked against the registry's). */
  async putManifest(repo: string, tag: string, manifest: OciManifest): Promise<{ digest: string; size: number }> {
    const body = Buffer.from(JSON.stringify(manifest));
    const digest = sha256Digest(body);
    const r = await this.http.call(
      "PUT",
      `/v2/${repo}/manifests/${tag}`,
      { "content-type": OCI_MANIFEST, "content-length": String(body.length) },
      body,
      [201],
    );
    r.res.resume();
    const got = r.headers["docker-content-digest"];
    if (got && got !== digest)
      throw new DigestMismatchError(
        `manifest ${repo}:${tag}`,
        { digest, size: body.length },
        { digest: String(got), size: body.length },
      );
    return { digest, size: body.length };
  }

  /** The manifest at `ref` (tag or digest), verified against its digest. */
  async getManifest(repo: string, ref: string): Promise<{ manifest: OciManifest; digest: string; size: number }> {
    const r = await this.http.call("GET", `/v2/${repo}/manifests/${ref}`, { accept: OCI_MANIFEST }, undefined, [200], {
      notFound: ["manifest", `${repo}:${ref}`],
    });
    const parts: Buffer[] = [];
    for await (const p of r.res as AsyncIterable<Buffer>) parts.push(p);
    const body = Buffer.concat(parts);
    const digest = sha256Digest(body);
    const claimed = ref.startsWith("sha256:") ? ref : String(r.headers["docker-content-digest"] ?? digest);
    if (claimed !== digest)
      throw new DigestMismatchError(`manifest ${repo}:${ref}`, { digest: claimed }, { digest, size: body.length });
    return { manifest: JSON.parse(body.toString("utf8")) as OciManifest, digest, size: body.length };
  }

  /** Digest and size of the manifest at `ref`, or undefined when absent. */
  async headManifest(repo: string, ref: string): Promise<{ digest: string; size: number } | undefined> {
    const r = await this.http.call(
      "HEAD",
      `/v2/${repo}/manifests/${ref}`,
      { accept: OCI_MANIFEST },
      undefined,
      [200, 404],
    );
    r.res.resume();
    if (r.status === 404) return undefined;
    return { digest: String(r.headers["docker-content-digest"] ?? ""), size: Number(r.headers["content-length"] ?? 0) };
  }

  /** Deletes the manifest (by digest, as the distribution spec requires). Absent is fine. */
  async deleteManifest(repo: string, digest: string): Promise<void> {
    const r = await this.http.call("DELETE", `/v2/${repo}/manifests/${digest}`, {}, undefined, [202, 404]);
    r.res.resume();
  }
}

/**
 * Calls `onChunk` with every chunk `source` emits, as emitted; a returned promise pauses the
 * source until it settles. (A Readable's async iterator reads whatever is buffered as one
 * concatenated copy: for a gigabyte layer that is a gigabyte of copying.)
 */
export function eachChunk(source: Readable, onChunk: (chunk: Buffer) => Promise<void> | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    let failed = false;
    const fail = (err: unknown) => {
      if (failed) return;
      failed = true;
      source.off("data", onData);
      source.pause();
      reject(err);
    };
    // the consumer gave up: the source has no reader any more, so it is destroyed
    const abandon = (err: unknown) => {
      fail(err);
      source.destroy();
    };
    // the source may end while the last piece's wait is still pending (pausing a stream that
    // has nothing left to read does not hold back its 'end'): finish only after that wait
    let pending: Promise<unknown> = Promise.resolve();
    const onData = (c: Buffer | string) => {
      try {
        const wait = onChunk(typeof c === "string" ? Buffer.from(c) : c);
        if (!wait) return;
        source.pause();
        pending = wait.then(() => failed || source.resume(), abandon);
      } catch (err) {
        abandon(err);
      }
    };
    finished(source, (err) => (err ? fail(err) : void pending.then(() => failed || resolve())));
    source.on("data", onData);
  });
}
