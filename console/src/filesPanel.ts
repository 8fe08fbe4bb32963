// The file browser: a directory's entries (listed by a small POSIX sh loop through exec, since
// the API moves files only as tar), upload by drag-and-drop or picker, download, with progress.
// Every name is shown as text.
import { sandboxPath } from "./actions.ts";
import { download, fromBase64, stream, upload } from "./api.ts";
import { bytes, h, replace } from "./dom.ts";
import { fail } from "./shell.ts";
import { firstFile, tarFile } from "./tar.ts";

/** Prints "type size name\0" per entry; portable to busybox and dash, no GNU find needed. */
const LIST_SCRIPT =
  'cd "$1" || exit 2; for f in * .[!.]* ..?*; do { [ -e "$f" ] || [ -L "$f" ]; } || continue; ' +
  'if [ -d "$f" ]; then t=d; s=0; else t=f; s=$(( $(wc -c < "$f" 2>/dev/null || echo 0) + 0 )); fi; ' +
  'printf \'%s %s %s\\0\' "$t" "$s" "$f"; done';

interface Entry {
  type: "d" | "f";
  size: number;
  name: string;
}

export function parseListing(out: string): Entry[] {
  return out
    .split("\0")
    .filter(Boolean)
    .map((rec) => {
      const [t, s] = rec.split(" ", 2);
      const name = rec.slice(t.length + s.length + 2);
      return { type: t === "d" ? ("d" as const) : ("f" as const), size: Number(s.trim()) || 0, name };
    })
    .sort((a, b) => (a.type !== b.type ? (a.type === "d" ? -1 : 1) : a.name < b.name ? -1 : 1));
}

async function list(id: string, dir: string, signal: AbortSignal): Promise<Entry[]> {
  const dec = new TextDecoder();
  let out = "";
  let stderr = "";
  let code: number | undefined;
  await stream(
    "POST",
    `${sandboxPath(id)}/exec`,
    { command: ["sh", "-c", LIST_SCRIPT, "sh", dir] },
    (l) => {
      if (!l) return;
      const f = JSON.parse(l) as { stream?: string; data?: string; exit?: { exitCode: number } };
      if (f.stream === "stdout") out += dec.decode(fromBase64(f.data!), { stream: true });
      if (f.stream === "stderr") stderr += new TextDecoder().decode(fromBase64(f.data!));
      if (f.exit) code = f.exit.exitCode;
    },
    signal,
  );
  if (code !== 0) throw new Error(`listing ${dir} failed (exit ${code}): ${stderr.trim()}`);
  return parseListing(out);
}

const join = (dir: string, name: string) => `${dir.replace(/\/+$/, "")}/${name}`;

export function filesPanel(id: string, signal: AbortSignal): HTMLElement {
  const dir = h("input", { value: "/workspace", data: { test: "files-dir" } });
  const err = h("div", { class: "error", data: { test: "files-error" } });
  const tbody = h("tbody", { data: { test: "files" } });
  const progress = h("progress", { value: "0" });
  const progressText = h("span", { class: "muted", data: { test: "files-progress" } });
  progress.hidden = true;

  const show = (done: number, total: number, what: string) => {
    progress.hidden = false;
    progress.max = total || 1;
    progress.value = done;
    progressText.textContent = `${what}: ${bytes(done)}${total ? ` of ${bytes(total)}` : ""}`;
  };

  async function getFile(name: string): Promise<void> {
    const tar = await download(`${sandboxPath(id)}/files?path=${encodeURIComponent(join(dir.value, name))}`, (n) =>
      show(n, 0, `downloading ${name}`),
    );
    const file = firstFile(tar);
    if (!file) throw new Error(`${name}: the archive held no regular file`);
    const url = URL.createObjectURL(new Blob([file.data.slice()]));
    const a = h("a", { href: url });
    a.download = file.name;
    a.click();
    setTimeout(() => URL.revokeObjectURL(url), 10_000);
  }

  async function refresh(): Promise<void> {
    const entries = await list(id, dir.value, signal);
    replace(
      tbody,
      ...entries.map((e) =>
        h(
          "tr",
          { data: { file: e.name } },
          h("td", { class: "name" }, e.type === "d" ? `${e.name}/` : e.name),
          h("td", { class: "num" }, e.type === "d" ? "" : bytes(e.size)),
          h(
            "td",
            {},
            e.type === "f"
              ? h("button", { on: { click: () => getFile(e.name).catch((x) => fail(err, x)) } }, "download")
              : null,
          ),
        ),
      ),
    );
    if (!entries.length) tbody.appendChild(h("tr", {}, h("td", { class: "muted" }, "(empty)")));
  }

  async function put(files: FileList | File[]): Promise<void> {
    for (const f of Array.from(files)) {
      const tar = tarFile(f.name, new Uint8Array(await f.arrayBuffer()), f.lastModified / 1000);
      await upload(
        `${sandboxPath(id)}/files?path=${encodeURIComponent(dir.value)}`,
        new Blob([tar.slice()]),
        "application/x-tar",
        (sent, total) => show(sent, total, `uploading ${f.name}`),
      );
    }
    progressText.textContent = "upload done";
    await refresh();
  }

  const picker = h("input", { type: "file", data: { test: "files-picker" } });
  picker.multiple = true;
  picker.addEventListener("change", () => {
    if (picker.files?.length) put(picker.files).catch((x) => fail(err, x));
  });
  const drop = h(
    "div",
    { class: "drop", data: { test: "files-drop" } },
    "Drop files here to upload them into the directory",
  );
  drop.addEventListener("dragover", (ev) => {
    ev.preventDefault();
    drop.classList.add("over");
  });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (ev) => {
    ev.preventDefault();
    drop.classList.remove("over");
    if (ev.dataTransfer?.files.length) put(ev.dataTransfer.files).catch((x) => fail(err, x));
  });
  const go = () => {
    err.textContent = "";
    refresh().catch((x) => {
      if (!signal.aborted) fail(err, x);
    });
  };
  queueMicrotask(go);
  return h(
    "section",
    { class: "panel", data: { panel: "files" } },
    h("h2", {}, "Files"),
    h("div", { class: "toolbar" }, dir, h("button", { data: { action: "list" }, on: { click: go } }, "List"), picker),
    drop,
    progress,
    progressText,
    err,
    h("table", {}, h("thead", {}, h("tr", {}, h("th", {}, "name"), h("th", {}, "size"), h("th", {}))), tbody),
  );
}
