// filesystem.Filesystem/WatchDir without an agent in the sandbox: one long-lived command per
// watcher (through the Manager's exec, like every envd call) lists the directory every interval
// and prints the listing only when its checksum changed; the control plane compares the last two
// listings and turns the difference into the events the SDK's files.watchDir understands. The
// polling runs inside the sandbox, on the sandbox's own CPU and pids limits, and costs the
// control plane nothing while nothing changes. Pure here: the script, the listing parser and the
// diff, so the rules are table-tested; watchService.ts runs them.
//
// What polling cannot see: changes undone within one interval, and the order of changes within
// one. A file created with content is a create then a write, as inotify reports it; a rename
// within the watched tree (same inode, new name) is a rename of the old name then a create of
// the new one, as envd (fsnotify) reports it.
import { EventType } from "./gen/filesystem/filesystem_pb.ts";
import { EXIT } from "./sandboxCommand.ts";

/** type, inode, size, mtime (s.frac), mode (octal), path relative to the watched directory */
const WATCH_FORMAT = "%y\\0%i\\0%s\\0%T@\\0%m\\0%P\\0";
const FIELDS = 6;

/**
 * $1 directory, $2 interval in seconds, $3 max depth ("" = recursive). A listing is the entries
 * followed by one empty field (a lone NUL): names never contain NUL, so it cannot be mistaken.
 * The first listing always goes out: it is the baseline. A listing that changes between the
 * checksum and the print is printed again on the next round, which is harmless (no difference).
 */
export const WATCH_SCRIPT = `
d=$1
if [ ! -e "$d" ] && [ ! -L "$d" ]; then exit ${EXIT.missing}; fi
if [ ! -d "$d" ]; then exit ${EXIT.notDirectory}; fi
list() {
  if [ -n "$3" ]; then find "$d" -mindepth 1 -maxdepth "$3" -printf '${WATCH_FORMAT}' 2>/dev/null
  else find "$d" -mindepth 1 -printf '${WATCH_FORMAT}' 2>/dev/null; fi
}
prev=
while :; do
  sum=$(list "$@" | cksum)
  if [ "$sum" != "$prev" ]; then list "$@"; printf '\\0'; prev=$sum; fi
  sleep "$2"
done
`;

export interface WatchedEntry {
  type: string;
  inode: string;
  size: string;
  mtime: string;
  mode: string;
}

export type Listing = Map<string, WatchedEntry>;

export interface WatchEvent {
  name: string;
  type: EventType;
}

/**
 * Cuts the command's output into listings as it arrives: feed() returns the listings completed by
 * this chunk. Bytes are kept only up to `maxBytes` per listing; past it the listing is refused
 * (the directory is too large to watch this way).
 */
export class ListingReader {
  private carry = Buffer.alloc(0);
  private fields: string[] = [];
  private current: Listing = new Map();
  private bytes = 0;

  constructor(private readonly maxBytes: number) {}

  feed(chunk: Buffer): Listing[] {
    const done: Listing[] = [];
    let buf = this.carry.length ? Buffer.concat([this.carry, chunk]) : chunk;
    for (let nul = buf.indexOf(0); nul >= 0; nul = buf.indexOf(0)) {
      this.field(buf.subarray(0, nul).toString("utf8"), done);
      buf = buf.subarray(nul + 1);
    }
    if (buf.length > this.maxBytes) throw new Error(`a listing of more than ${this.maxBytes} bytes`);
    this.carry = Buffer.from(buf);
    return done;
  }

  private field(f: string, done: Listing[]): void {
    if (this.fields.length === 0 && f === "") {
      done.push(this.current);
      this.current = new Map();
      this.bytes = 0;
      return;
    }
    this.bytes += f.length + 1;
    if (this.bytes > this.maxBytes) throw new Error(`a listing of more than ${this.maxBytes} bytes`);
    this.fields.push(f);
    if (this.fields.length < FIELDS) return;
    const [type, inode, size, mtime, mode, name] = this.fields as [string, string, string, string, string, string];
    this.fields = [];
    this.current.set(name, { type, inode, size, mtime, mode });
  }
}

const byName = (a: WatchEvent, b: WatchEvent) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);

/** The events that take `before` to `after`: removes and renames, then creates, then changes. */
export function decideWatchEvents(before: Listing, after: Listing): WatchEvent[] {
  const removed = [...before].filter(([name]) => !after.has(name));
  const created = [...after].filter(([name]) => !before.has(name));
  // a name that went and a name that came with the same inode and type: renamed in the tree
  const goneByInode = new Map(removed.map(([name, e]) => [`${e.type}:${e.inode}`, name]));
  const renamedFrom = new Map<string, string>();
  for (const [name, e] of created) {
    const from = goneByInode.get(`${e.type}:${e.inode}`);
    if (from !== undefined) {
      renamedFrom.set(name, from);
      goneByInode.delete(`${e.type}:${e.inode}`);
    }
  }
  const renamedOld = new Set(renamedFrom.values());
  const events: WatchEvent[] = [];
  for (const [name] of removed) events.push({ name, type: renamedOld.has(name) ? EventType.RENAME : EventType.REMOVE });
  events.sort(byName);
  const creates: WatchEvent[] = [];
  for (const [name, e] of created) {
    creates.push({ name, type: EventType.CREATE });
    // written while it was new: inotify would have said so (a rename moves content, it writes none)
    if (e.type === "f" && e.size !== "0" && !renamedFrom.has(name)) creates.push({ name, type: EventType.WRITE });
  }
  const changes: WatchEvent[] = [];
  for (const [name, e] of after) {
    const was = before.get(name);
    if (!was) continue;
    if (was.type !== e.type || was.inode !== e.inode) {
      changes.push({ name, type: EventType.REMOVE }, { name, type: EventType.CREATE });
      if (e.type === "f" && e.size !== "0") changes.push({ name, type: EventType.WRITE });
    } else if (e.type !== "d" && (was.size !== e.size || was.mtime !== e.mtime)) {
      // a directory's mtime moves with its entries, which have events of their own
      changes.push({ name, type: EventType.WRITE });
    } else if (was.mode !== e.mode) {
      changes.push({ name, type: EventType.CHMOD });
    }
  }
  return [...events, ...creates, ...changes];
}
