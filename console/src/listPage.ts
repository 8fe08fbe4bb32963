// The sandbox list: live (polled every 2 s, the API has no watch), filtered by state, profile and
// metadata, paged, with create, pause, resume and kill. Only the rows scrolled into view are drawn
// (planWindow), and they are keyed by id and reused, changing only the cells whose text changed:
// an update of a 1,000-sandbox page costs the DOM work of about fifty rows. Drawing all 1,000,
// even with reuse, measured 480-690 ms per update in headless Chromium here (target <= 100 ms).
import { create, kill, observe, pause, resume } from "./actions.ts";
import { call, type Sandbox } from "./api.ts";
import { append, duration, h, replace } from "./dom.ts";
import { type ListFilter, PHASES, planList, planPage, planWindow } from "./listView.ts";
import { fail, type PageContext } from "./shell.ts";

const POLL_MS = 2000;
const PAGE_SIZES = [50, 200, 1000];
/** a row's height before one has been laid out; the first drawn row's real height replaces it */
const ROW_GUESS_PX = 38;

interface Row {
  tr: HTMLTableRowElement;
  cells: HTMLTableCellElement[];
  texts: string[];
  meta: HTMLTableCellElement;
  metaKey: string;
  buttons: { pause: HTMLButtonElement; resume: HTMLButtonElement; kill: HTMLButtonElement };
  phase: string;
}

function parseMetadata(text: string): Record<string, string> | undefined {
  const out: Record<string, string> = {};
  for (const part of text.split(",")) {
    const p = part.trim();
    if (!p) continue;
    const eq = p.indexOf("=");
    if (eq <= 0) throw new Error(`metadata: "${p}" is not key=value; write key=value, separated by commas`);
    out[p.slice(0, eq).trim()] = p.slice(eq + 1).trim();
  }
  return Object.keys(out).length ? out : undefined;
}

export function listPage(ctx: PageContext): () => void {
  const filter: ListFilter = { phase: "", profile: "", metadata: "" };
  let pageIndex = 0;
  let pageSize = PAGE_SIZES[0];
  let all: Sandbox[] = [];
  const rows = new Map<string, Row>();
  const status = h("span", { class: "muted", data: { test: "list-status" } });
  const err = h("div", { class: "error", data: { test: "list-error" } });
  const tbody = h("tbody");
  const pager = h("div", { class: "pager" });
  const spacer = () => h("tr", { class: "pad" }, h("td", { class: "pad" }));
  const padTop = spacer();
  const padBottom = spacer();
  (padTop.firstChild as HTMLTableCellElement).colSpan = 8;
  (padBottom.firstChild as HTMLTableCellElement).colSpan = 8;
  tbody.append(padTop, padBottom);
  const table = h("table", { class: "list", data: { test: "sandboxes" } });
  const scroller = h("div", { class: "list-scroll" }, table);
  let rowHeight = 0;
  let scrollFrame = 0;
  scroller.addEventListener("scroll", () => {
    if (scrollFrame) return;
    scrollFrame = requestAnimationFrame(() => {
      scrollFrame = 0;
      render("sbx:list-scroll");
    });
  });

  // one listener for every row's buttons: a thousand rows need no thousand closures
  const ACTIONS: Record<string, (id: string) => Promise<unknown>> = { pause, resume, kill };
  tbody.addEventListener("click", (ev) => {
    const button = (ev.target as HTMLElement).closest("button");
    const id = button?.closest("tr")?.dataset.id;
    const run = button && ACTIONS[button.dataset.action ?? ""];
    if (!button || !id || !run) return;
    button.disabled = true;
    run(id)
      .catch((e) => fail(err, e))
      .finally(refresh);
  });

  const textsOf = (s: Sandbox, now: number): string[] => [
    s.phase,
    s.profile,
    s.size + (s.cpuRequestMillis ? ` · ${s.cpuRequestMillis}m` : ""),
    duration(now - Date.parse(s.createdAt)),
    duration(Date.parse(s.expiresAt) - now),
  ];

  function makeRow(s: Sandbox): Row {
    const link = h("a", { href: `#/sandbox/${encodeURIComponent(s.id)}` }, s.id);
    const cells = [0, 1, 2, 3, 4].map((i) => h("td", { class: i >= 3 ? "num" : i === 0 ? "phase" : "" }));
    const meta = h("td");
    const button = (action: string, cls = "") => h("button", { class: cls, data: { action } }, action);
    const buttons = { pause: button("pause"), resume: button("resume"), kill: button("kill", "danger") };
    const actions = h("td", { class: "actions" }, buttons.pause, buttons.resume, buttons.kill);
    const tr = h("tr", { data: { id: s.id } }, h("td", {}, link), ...cells, meta, actions);
    return { tr, cells, texts: ["", "", "", "", ""], meta, metaKey: "", buttons, phase: "" };
  }

  function update(row: Row, s: Sandbox, now: number): void {
    const texts = textsOf(s, now);
    for (let i = 0; i < texts.length; i++)
      if (row.texts[i] !== texts[i]) {
        row.texts[i] = texts[i];
        row.cells[i].textContent = texts[i];
      }
    if (row.phase !== s.phase) {
      row.cells[0].className = `phase phase-${s.phase}`;
      row.buttons.pause.hidden = s.phase !== "Running";
      row.buttons.resume.hidden = s.phase !== "Paused";
      for (const b of Object.values(row.buttons)) b.disabled = false;
      row.phase = s.phase;
    }
    const entries = Object.entries(s.metadata ?? {});
    const metaKey = JSON.stringify(entries);
    if (row.metaKey !== metaKey) {
      row.metaKey = metaKey;
      replace(row.meta, ...entries.map(([k, v]) => h("span", { class: "meta", title: `${k}=${v}` }, `${k}=${v}`)));
    }
  }

  /** Draws the page's rows in view; `measure` names the performance entry that times it. */
  function render(measure = "sbx:list-update"): void {
    performance.mark(`${measure}:start`);
    const now = Date.now();
    const page = planPage(planList(all, filter), pageIndex, pageSize);
    pageIndex = page.index;
    const win = planWindow(page.items.length, scroller.scrollTop, scroller.clientHeight, rowHeight || ROW_GUESS_PX);
    padTop.style.height = `${win.padTop}px`;
    padBottom.style.height = `${win.padBottom}px`;
    table.dataset.rows = String(page.items.length);
    const keep = new Set<string>();
    let prev: Element = padTop;
    for (const s of page.items.slice(win.start, win.end)) {
      keep.add(s.id);
      const row = rows.get(s.id) ?? makeRow(s);
      rows.set(s.id, row);
      update(row, s, now);
      // move only rows out of place
      const want = prev.nextElementSibling;
      if (want !== row.tr) tbody.insertBefore(row.tr, want);
      prev = row.tr;
    }
    for (const [id, row] of rows)
      if (!keep.has(id)) {
        row.tr.remove();
        rows.delete(id);
      }
    replace(
      pager,
      h("button", { on: { click: () => turn(-1) } }, "‹ prev"),
      `page ${page.index + 1} of ${page.count}`,
      h("button", { on: { click: () => turn(1) } }, "next ›"),
    );
    status.textContent = `${all.length} sandboxes · updated ${new Date(now).toLocaleTimeString()}`;
    void tbody.offsetHeight; // layout inside the measure: the update is timed until it can paint
    performance.measure(measure, `${measure}:start`);
    performance.mark("sbx:meaningful");
    const first = padTop.nextElementSibling as HTMLElement;
    if (!rowHeight && first !== padBottom) {
      // every row is one line high (fixed layout, no wrapping): the first one's height is all rows'
      rowHeight = first.offsetHeight;
      if (rowHeight !== ROW_GUESS_PX) render(measure);
    }
  }

  function turn(by: number): void {
    pageIndex += by;
    scroller.scrollTop = 0;
    render();
  }

  let timer: ReturnType<typeof setTimeout> | undefined;
  let stopped = false;
  const ac = new AbortController();
  async function refresh(): Promise<void> {
    clearTimeout(timer);
    try {
      all = (await call<{ sandboxes: Sandbox[] }>("GET", "/v1/sandboxes", undefined, ac.signal)).sandboxes;
      for (const s of all) observe(s);
      err.textContent = "";
      render();
    } catch (e) {
      if (!stopped) fail(err, e);
    }
    if (!stopped) timer = setTimeout(refresh, POLL_MS);
  }

  const input = (placeholder: string, key: "profile" | "metadata") =>
    h("input", {
      placeholder,
      data: { filter: key },
      on: {
        input: (ev) => {
          filter[key] = (ev.target as HTMLInputElement).value;
          pageIndex = 0;
          render();
        },
      },
    });
  const phaseSelect = h(
    "select",
    {
      data: { filter: "phase" },
      on: {
        change: (ev) => {
          filter.phase = (ev.target as HTMLSelectElement).value;
          render();
        },
      },
    },
    h("option", { value: "" }, "every state"),
    ...PHASES.map((p) => h("option", { value: p }, p)),
  );
  const sizeSelect = h(
    "select",
    {
      data: { test: "page-size" },
      on: {
        change: (ev) => {
          pageSize = Number((ev.target as HTMLSelectElement).value);
          render();
        },
      },
    },
    ...PAGE_SIZES.map((n) => h("option", { value: String(n) }, `${n} a page`)),
  );

  const newProfile = h("input", { placeholder: "profile (default)", data: { create: "profile" } });
  const newSize = h("input", { placeholder: "size (default)", data: { create: "size" } });
  const newMeta = h("input", { placeholder: "metadata key=value, …", data: { create: "metadata" } });
  const createButton = h(
    "button",
    {
      class: "primary",
      data: { action: "create" },
      on: {
        click: () => {
          createButton.disabled = true;
          Promise.resolve()
            .then(() => {
              const body: Record<string, unknown> = {};
              if (newProfile.value.trim()) body.profile = newProfile.value.trim();
              if (newSize.value.trim()) body.size = newSize.value.trim();
              const metadata = parseMetadata(newMeta.value);
              if (metadata) body.metadata = metadata;
              return create(body);
            })
            .then((s) => observe(s))
            .catch((e) => fail(err, e))
            .finally(() => {
              createButton.disabled = false;
              void refresh();
            });
        },
      },
    },
    "Create",
  );

  const columns = ["id", "state", "profile", "size", "age", "ends", "meta", "actions"];
  const headings = ["id", "state", "profile", "size", "age", "ends in", "metadata", ""];
  append(
    table,
    h("colgroup", {}, ...columns.map((c) => h("col", { class: c }))),
    h("thead", {}, h("tr", {}, ...headings.map((t) => h("th", {}, t)))),
    tbody,
  );
  replace(
    ctx.root,
    h("h1", {}, "Sandboxes"),
    h("section", { class: "panel" }, h("div", { class: "toolbar" }, newProfile, newSize, newMeta, createButton)),
    h(
      "section",
      { class: "panel" },
      h(
        "div",
        { class: "toolbar" },
        phaseSelect,
        input("profile", "profile"),
        input("metadata: key=value or text", "metadata"),
        h("span", { class: "spacer" }),
        sizeSelect,
        status,
      ),
      err,
      scroller,
      pager,
    ),
  );
  void refresh();
  return () => {
    stopped = true;
    clearTimeout(timer);
    cancelAnimationFrame(scrollFrame);
    ac.abort();
  };
}
