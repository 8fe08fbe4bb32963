// The console's entry: a login form, then three pages chosen by the URL's fragment (#/ the list,
// #/sandbox/{id} one sandbox, #/pool the pool and budget). One document, so the token that lives
// in memory (api.ts) survives moving between pages.
import { call, hasToken, setToken } from "./api.ts";
import { h, replace } from "./dom.ts";
import { listPage } from "./listPage.ts";
import { poolPage } from "./poolPage.ts";
import { sandboxPage } from "./sandboxPage.ts";
import { fail, type PageContext } from "./shell.ts";
import { stampStyleNonce } from "./styleNonce.ts";

let dispose: (() => void) | undefined;

function nav(): void {
  const here = location.hash || "#/";
  const link = (href: string, text: string, active: boolean) => h("a", { href, class: active ? "active" : "" }, text);
  replace(
    document.getElementById("nav")!,
    link("#/", "Sandboxes", here === "#/" || here.startsWith("#/sandbox/")),
    link("#/pool", "Pool & budget", here === "#/pool"),
  );
  replace(
    document.getElementById("who")!,
    h(
      "button",
      {
        data: { action: "sign-out" },
        on: {
          click: () => {
            setToken(undefined);
            route();
          },
        },
      },
      "Sign out",
    ),
  );
}

function login(root: HTMLElement): void {
  replace(document.getElementById("nav")!);
  replace(document.getElementById("who")!);
  const token = h("input", { type: "password", placeholder: "sbx_… or a JWT", id: "token" });
  const err = h("div", { class: "error", data: { test: "login-error" } });
  const submit = h("button", { class: "primary", type: "submit" }, "Sign in");
  const form = h(
    "form",
    {
      class: "panel login",
      on: {
        submit: (ev) => {
          ev.preventDefault();
          submit.disabled = true;
          setToken(token.value.trim());
          call("GET", "/v1/sandboxes")
            .then(() => route())
            .catch((e) => {
              setToken(undefined);
              fail(err, e);
            })
            .finally(() => (submit.disabled = false));
        },
      },
    },
    h("h1", {}, "Sign in to sbx"),
    h("label", { class: "muted" }, "Token (kept in this tab's memory only; sent as Authorization: Bearer)"),
    token,
    submit,
    err,
  );
  // a <form> whose submit is handled here; form-action 'none' in the CSP forbids real submission
  replace(root, form);
  token.focus();
  performance.mark("sbx:meaningful");
}

function route(): void {
  dispose?.();
  dispose = undefined;
  const root = document.getElementById("app")!;
  if (!hasToken()) {
    login(root);
    return;
  }
  nav();
  const ctx: PageContext = { root };
  const hash = location.hash || "#/";
  const m = /^#\/sandbox\/(.+)$/.exec(hash);
  if (m) dispose = sandboxPage(ctx, decodeURIComponent(m[1]));
  else if (hash === "#/pool") dispose = poolPage(ctx);
  else dispose = listPage(ctx);
}

stampStyleNonce(document); // before anything creates a <style>: xterm.js does
window.addEventListener("hashchange", route);
route();
