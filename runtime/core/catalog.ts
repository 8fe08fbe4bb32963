// ImageCatalog: profile -> image. Entries come from the config object (`catalog`) and,
// when `catalogPath` is set, from a JSON file { "<profile>": "<image>" } that is re-read when
// it changes, so a new image ships without restarting the service. A file that fails to parse
// keeps the last good catalog and is logged; it never empties the catalog.
import { type FSWatcher, readFileSync, watch } from "node:fs";
import { basename, dirname } from "node:path";
import { ValidationError } from "./errors.ts";
import type { Logger } from "./log.ts";
import type { ImageRef } from "./types.ts";

export interface ImageCatalogOptions {
  /** inline entries (config.catalog); file entries override them */
  inline: Record<string, string>;
  /** JSON file to read and watch (config.catalogPath) */
  path?: string;
  logger: Logger;
  /** coalesce bursts of change events (an editor or a ConfigMap symlink swap emits several) */
  debounceMs?: number;
}

/** What a backend needs of the catalog: the image of a profile now (warm pools). */
export interface ImageLookup {
  /** undefined for an unknown profile */
  imageOf(profile: string): string | undefined;
}

const PROFILE = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;

/** Parse and check a catalog document. Throws ValidationError naming the bad entry. */
export function parseCatalog(source: string, text: string): Record<string, string> {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (e) {
    throw new ValidationError(
      source,
      text.slice(0, 80),
      `must be JSON { "<profile>": "<image>" }: ${(e as Error).message}`,
    );
  }
  if (!doc || typeof doc !== "object" || Array.isArray(doc)) {
    throw new ValidationError(source, doc, 'must be a JSON object { "<profile>": "<image>" }');
  }
  const out: Record<string, string> = {};
  for (const [profile, image] of Object.entries(doc)) {
    if (!PROFILE.test(profile))
      throw new ValidationError(
        `${source}.${profile}`,
        profile,
        "profile names are lowercase letters, digits and '-' (max 63)",
      );
    if (typeof image !== "string" || image.trim() === "")
      throw new ValidationError(`${source}.${profile}`, image, "must be a non-empty image reference string");
    out[profile] = image;
  }
  return out;
}

/**
 * The one catalog reader. The composition root (runtime/backends.ts) builds one, starts its
 * watch with the Manager and hands it to the backend too; a backend constructed on its own
 * (tests, benchmarks) builds an unwatched one from the same config with `catalogFrom`.
 */
export class ImageCatalog implements ImageLookup {
  private entries: Record<string, string>;
  private watcher?: FSWatcher;
  private timer?: NodeJS.Timeout;
  private readonly listeners = new Set<(profiles: string[]) => void>();

  constructor(private readonly opts: ImageCatalogOptions) {
    this.entries = { ...opts.inline };
    if (opts.path) this.entries = { ...opts.inline, ...parseCatalog(opts.path, readFileSync(opts.path, "utf8")) };
  }

  /** profile -> image, or ValidationError (400) listing the valid profiles. */
  resolve(profile: string): ImageRef {
    const image = Object.hasOwn(this.entries, profile) ? this.entries[profile] : undefined;
    if (image === undefined) {
      throw new ValidationError("profile", profile, `unknown profile; use one of: ${this.profiles().join(", ")}`);
    }
    return { profile, image };
  }

  imageOf(profile: string): string | undefined {
    return Object.hasOwn(this.entries, profile) ? this.entries[profile] : undefined;
  }

  profiles(): string[] {
    return Object.keys(this.entries).sort();
  }

  /** Called after every successful reload (tests and metrics use it). */
  onReload(listener: (profiles: string[]) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /**
   * Watch the file's directory, not the file: a Kubernetes ConfigMap update replaces a symlink,
   * and an editor may write a new inode; both are invisible to a watch on the old file.
   */
  start(): void {
    const path = this.opts.path;
    if (!path || this.watcher) return;
    const name = basename(path);
    this.watcher = watch(dirname(path), (_event, file) => {
      if (file !== null && file !== name && !file.startsWith("..")) return;
      clearTimeout(this.timer);
      this.timer = setTimeout(() => this.reload(), this.opts.debounceMs ?? 50);
    });
    this.watcher.on("error", (err) =>
      this.opts.logger.error({ op: "catalog.watch", path, err }, "catalog watch failed; keeping the current catalog"),
    );
  }

  /** Re-read the file now. Returns false (and keeps the last good catalog) when it is bad. */
  reload(): boolean {
    const path = this.opts.path;
    if (!path) return true;
    try {
      const next = { ...this.opts.inline, ...parseCatalog(path, readFileSync(path, "utf8")) };
      this.entries = next;
      this.opts.logger.info({ op: "catalog.reload", path, profiles: this.profiles() }, "image catalog reloaded");
      for (const l of this.listeners) l(this.profiles());
      return true;
    } catch (err) {
      this.opts.logger.error(
        { op: "catalog.reload", path, err },
        "image catalog file is invalid; keeping the last good catalog",
      );
      return false;
    }
  }

  close(): void {
    clearTimeout(this.timer);
    this.watcher?.close();
    this.watcher = undefined;
  }
}

/** The injected catalog, else one read once (not watched) from config.catalog and config.catalogPath. */
export function catalogFrom(
  config: { catalog: Record<string, string>; catalogPath?: string },
  logger: Logger,
  given?: ImageLookup,
): ImageLookup {
  return given ?? new ImageCatalog({ inline: config.catalog, path: config.catalogPath, logger });
}
