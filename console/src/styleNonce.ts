// The one nonce the console's styles carry. xterm.js writes its layout and theme into <style>
// elements it creates, which a strict style-src refuses. The service gives the page a fresh
// nonce per load (runtime/server/console.ts): in the CSP's style-src and on the page's stylesheet
// link, where the browser hides it from markup and selectors and only script can read it. Every
// <style> element created through document.createElement gets it, before it is inserted (a
// nonce set afterwards is ignored). Markup cannot create a styled element: the console has no
// path from a string to markup (dom.ts), and a parser-made <style> has no nonce. Style
// attributes stay refused (a nonce does not cover them): xterm's 24-bit colours use them, so
// such cells show in the default colours, a cost taken for keeping style-src-attr closed.

/** Installs the stamp; without a nonce on the page (an old build) nothing changes. */
export function stampStyleNonce(doc: Document): void {
  const nonce = doc.querySelector<HTMLLinkElement>('link[rel="stylesheet"][nonce]')?.nonce;
  if (!nonce) return;
  const create = doc.createElement.bind(doc);
  doc.createElement = ((tag: string, options?: ElementCreationOptions) => {
    const el = create(tag, options);
    if (el instanceof HTMLStyleElement) el.setAttribute("nonce", nonce);
    return el;
  }) as Document["createElement"];
}
