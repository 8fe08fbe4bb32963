// The command runner, beside the terminal (terminalPanel.ts): one-shot commands with stdout and
// stderr shown apart, through plain HTTP, so it also works where a proxy passes no websocket. Runs
// `sh -c <line>` through POST /v1/sandboxes/{id}/exec and appends the NDJSON stream's output as
// it arrives, stdout and stderr apart, then the exit status.
import { sandboxPath } from "./actions.ts";
import { fromBase64, stream } from "./api.ts";
import { h } from "./dom.ts";
import { fail } from "./shell.ts";

interface Frame {
  started?: boolean;
  stream?: "stdout" | "stderr";
  data?: string;
  exit?: { exitCode: number; timedOut?: boolean; oomKilled?: boolean; durationMs?: number };
  error?: { code: string; message: string };
}

export function runnerPanel(id: string, signal: AbortSignal): HTMLElement {
  const out = h("pre", { class: "out", data: { test: "runner-output" } });
  const err = h("div", { class: "error" });
  const line = h("input", { placeholder: "a shell command, e.g. ls -la /workspace", data: { test: "runner-input" } });
  line.style.flex = "1";
  const run = h("button", { class: "primary", type: "submit", data: { action: "run" } }, "Run");
  const put = (text: string, cls?: string) => {
    out.appendChild(cls ? h("span", { class: cls }, text) : document.createTextNode(text));
    out.scrollTop = out.scrollHeight;
  };

  async function exec(command: string): Promise<void> {
    const decoders = { stdout: new TextDecoder(), stderr: new TextDecoder() };
    put(`$ ${command}\n`, "status");
    await stream(
      "POST",
      `${sandboxPath(id)}/exec`,
      { command: ["sh", "-c", command] },
      (l) => {
        if (!l) return;
        const f = JSON.parse(l) as Frame;
        if (f.stream && f.data !== undefined)
          put(decoders[f.stream].decode(fromBase64(f.data), { stream: true }), f.stream === "stderr" ? "stderr" : "");
        else if (f.exit)
          put(
            `[exit ${f.exit.exitCode}${f.exit.timedOut ? ", timed out" : ""}${f.exit.oomKilled ? ", out of memory" : ""}]\n`,
            "status",
          );
        else if (f.error) put(`[error ${f.error.code}: ${f.error.message}]\n`, "stderr");
      },
      signal,
    );
  }

  const form = h(
    "form",
    {
      class: "toolbar",
      on: {
        submit: (ev) => {
          ev.preventDefault();
          const command = line.value.trim();
          if (!command) return;
          run.disabled = true;
          err.textContent = "";
          exec(command)
            .catch((e) => {
              if (!signal.aborted) fail(err, e);
            })
            .finally(() => (run.disabled = false));
        },
      },
    },
    line,
    run,
  );
  return h("section", { class: "panel", data: { panel: "runner" } }, h("h2", {}, "Run a command"), form, err, out);
}
