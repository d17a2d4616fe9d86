// The paste box (src/oomguide/paste.py puts it on a page): `oomguide explain` run in the browser.
// This file only loads Pyodide (vendored under assets/pyodide/ at build time), unpacks the site's
// copy of oomguide's torch-free code (assets/oomguide/explain.zip) and shows what
// oomguide.explain.browser.answer returns: the CLI's own text, in the page's language. It explains
// nothing itself. Nothing is fetched before the button is pressed.
(function () {
  "use strict";
  const box = document.querySelector(".oomguide-paste");
  if (!box || box.dataset.pyodide !== "yes") return;
  const input = box.querySelector(".oomguide-paste__input");
  const button = box.querySelector(".oomguide-paste__button");
  const status = box.querySelector(".oomguide-paste__status");
  const answerBox = box.querySelector(".oomguide-paste__answer");
  const base = box.dataset.base;
  // Opened as a file, the page may not fetch Pyodide's WebAssembly (chromium refuses file:// fetches):
  // say why the box cannot run and how to serve the site, in the page's language, and stop there.
  // One of the box's own lines as the status, its `commands` as code.
  function sayError(text) {
    status.textContent = "";
    text.split("`").forEach((part, i) => {
      const piece = document.createElement(i % 2 ? "code" : "span");
      piece.textContent = part;
      status.appendChild(piece);
    });
    status.classList.add("oomguide-paste__status--error");
  }
  if (window.location.protocol === "file:") {
    sayError(box.dataset.file);
    button.disabled = true;
    return;
  }
  const site = (path) => new URL(base + "/" + path, window.location.href).href;
  let python = null; // the promise of oomguide.explain.browser.answer, once asked for

  function loadScript(src) {
    return new Promise((resolve, reject) => {
      const script = document.createElement("script");
      script.src = src;
      script.onload = resolve;
      script.onerror = () => reject(new Error("cannot load " + src));
      document.head.appendChild(script);
    });
  }

  // A line of the box's own (in the page's language), shown as it is instead of "could not start".
  class BoxError extends Error {}

  // Browsers compile WebAssembly only when it is served as application/wasm; with another type
  // Pyodide's start never ends. Ask the server first, and say what it must change.
  async function checkWasmType() {
    const head = await fetch(site("assets/pyodide/pyodide.asm.wasm"), { method: "HEAD" });
    if (!head.ok) return; // a server without HEAD: Pyodide's own request says what is wrong
    const type = (head.headers.get("content-type") || "").split(";")[0].trim().toLowerCase();
    if (type !== "application/wasm") throw new BoxError(box.dataset.wasmType.replace("{type}", type || "-"));
  }

  async function start() {
    await checkWasmType();
    await loadScript(site("assets/pyodide/pyodide.js"));
    const pyodide = await window.loadPyodide({ indexURL: site("assets/pyodide/") });
    const response = await fetch(site("assets/oomguide/explain.zip"));
    if (!response.ok) throw new Error(response.status + " " + response.url);
    pyodide.unpackArchive(await response.arrayBuffer(), "zip", { extractDir: "/home/pyodide/oomguide-site" });
    pyodide.runPython("import sys; sys.path.insert(0, '/home/pyodide/oomguide-site')");
    return pyodide.pyimport("oomguide.explain.browser").answer;
  }

  function escape(text) {
    const span = document.createElement("span");
    span.textContent = text;
    return span.innerHTML;
  }

  // The CLI's text, with each section's address (given by Python, relative to this page) as a link.
  function show(text, links) {
    const lines = text.split("\n").map((line) => {
      const address = links.find((link) => line.trim().split(/\s+/)[0] === link);
      if (!address) return escape(line);
      const at = line.indexOf(address);
      return (
        escape(line.slice(0, at)) +
        '<a href="' + escape(address) + '">' + escape(address) + "</a>" +
        escape(line.slice(at + address.length))
      );
    });
    answerBox.querySelector("code").innerHTML = lines.join("\n");
    answerBox.hidden = false;
  }

  button.addEventListener("click", async () => {
    const started = performance.now();
    button.disabled = true;
    answerBox.hidden = true;
    status.classList.remove("oomguide-paste__status--error");
    status.textContent = python ? box.dataset.reading : box.dataset.loading;
    try {
      if (!python) python = start();
      const answer = await python;
      status.textContent = box.dataset.reading;
      const out = JSON.parse(answer(input.value, box.dataset.lang, base));
      if (out.error) {
        status.textContent = out.error;
        status.classList.add("oomguide-paste__status--error");
      } else {
        status.textContent = "";
        show(out.text, out.links);
      }
    } catch (error) {
      python = null;
      sayError(
        error instanceof BoxError
          ? error.message
          : box.dataset.failed.replace("{error}", String(error && error.message ? error.message : error)),
      );
    } finally {
      box.dataset.lastMs = String(Math.round(performance.now() - started));
      box.dataset.answers = String(Number(box.dataset.answers || 0) + 1);
      button.disabled = false;
    }
  });
})();
