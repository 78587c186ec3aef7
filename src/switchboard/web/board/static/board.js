/* Switchboard Board: the drawer dialog, live updates over SSE, copy buttons, JSON checks in place.
   Served from the package under script-src 'self'; no inline script, no eval. */
(function () {
  "use strict";

  var overlay = null;
  var openerId = null;
  var liveCount = 0;

  function byId(id) { return id ? document.getElementById(id) : null; }

  function markLive() {
    liveCount += 1;
    document.body.setAttribute("data-sb-live-count", String(liveCount));
  }

  // ------------------------------------------------------------------------------ the drawer

  function drawer() { return overlay ? overlay.querySelector("dialog[data-sb-drawer]") : null; }

  function closeButton() {
    var b = document.createElement("button");
    b.type = "button";
    b.className = "secondary outline sb-close";
    b.setAttribute("data-sb-close", "");
    b.setAttribute("aria-label", "Close");
    b.textContent = "\u2715";
    return b;
  }

  function openDrawer() {
    var dialog = drawer();
    if (!dialog) {
      if (!overlay.firstElementChild) { return; }
      // A fragment that is not a drawer (for example "not found"): show it in one all the same.
      dialog = document.createElement("dialog");
      dialog.className = "sb-drawer";
      dialog.setAttribute("data-sb-drawer", "");
      dialog.setAttribute("aria-labelledby", "sb-drawer-title");
      var article = document.createElement("article");
      article.appendChild(closeButton());
      while (overlay.firstChild) { article.appendChild(overlay.firstChild); }
      dialog.appendChild(article);
      overlay.appendChild(dialog);
    }
    if (!dialog.open) { dialog.showModal(); }
    var title = byId("sb-drawer-title");
    if (title) { title.focus(); }
  }

  function onDrawerClosed() {
    overlay.replaceChildren();
    var back = byId(openerId);
    if (back) { back.focus(); }
  }

  // ---------------------------------------------------------------------------- live updates

  function keepFocusReplace(target, fragment) {
    var active = document.activeElement;
    var activeId = active && target.contains(active) ? active.id : null;
    var values = {};
    target.querySelectorAll("input[id], textarea[id]").forEach(function (el) {
      if (el.type !== "hidden") { values[el.id] = el.value; }
    });
    target.replaceChildren(document.importNode(fragment, true));
    Object.keys(values).forEach(function (id) {
      var el = byId(id);
      if (el && target.contains(el)) { el.value = values[id]; }
    });
    if (window.htmx) { window.htmx.process(target); }
    if (activeId) {
      var again = byId(activeId);
      if (again) { again.focus(); } else if (byId("sb-drawer-title")) { byId("sb-drawer-title").focus(); }
    }
  }

  function mergeAttempts(container, fragment) {
    var newList = fragment.querySelector("ol");
    var oldList = container.querySelector("ol");
    if (!newList || !oldList) { keepFocusReplace(container, fragment); return; }
    var items = Array.prototype.slice.call(newList.children);
    var wanted = {};
    items.forEach(function (li) { wanted[li.id] = true; });
    Array.prototype.slice.call(oldList.children).forEach(function (li) {
      if (!wanted[li.id]) { li.remove(); }
    });
    items.forEach(function (li, i) {
      var existing = byId(li.id);
      if (existing && existing.parentNode === oldList) {
        if (existing.outerHTML !== li.outerHTML) {
          var active = document.activeElement;
          var hadFocus = active && existing.contains(active) ? active.getAttribute("href") : null;
          var fresh = document.importNode(li, true);
          existing.replaceWith(fresh);
          if (hadFocus) {
            var link = fresh.querySelector('a[href="' + CSS.escape(hadFocus) + '"]');
            if (link) { link.focus(); }
          }
        }
      } else {
        oldList.insertBefore(document.importNode(li, true), oldList.children[i] || null);
      }
    });
  }

  function fetchHtml(url, headers) {
    var h = { "HX-Request": "true" };
    Object.keys(headers || {}).forEach(function (k) { h[k] = headers[k]; });
    return fetch(url, { headers: h, credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.status === 200 ? r.text() : null; });
  }

  // Every render of the panel or the drawer counts: a live refresh answered after a newer render (a
  // later refresh, or an action's own answer in the drawer) is dropped, so an older read of a todo
  // never overwrites a newer one.
  var renders = { panel: 0, drawer: 0 };

  function refreshPanel() {
    var panel = byId("sb-todos-panel");
    if (!panel) { return; }
    var render = ++renders.panel;
    fetchHtml(panel.getAttribute("data-sb-panel"), { "X-SB-Part": "panel" }).then(function (html) {
      if (html === null || render !== renders.panel) { return; }
      var tpl = document.createElement("template");
      tpl.innerHTML = html;
      keepFocusReplace(panel, tpl.content);
      markLive();
    });
  }

  function refreshDrawer(todoId) {
    var render = ++renders.drawer;
    fetchHtml("/todos/" + encodeURIComponent(todoId) + "/live").then(function (html) {
      var dialog = drawer();
      if (html === null || render !== renders.drawer || !dialog || dialog.getAttribute("data-sb-todo") !== todoId) {
        return;
      }
      var tpl = document.createElement("template");
      tpl.innerHTML = html;
      tpl.content.querySelectorAll("template[data-sb-for]").forEach(function (part) {
        var target = byId(part.getAttribute("data-sb-for"));
        if (!target) { return; }
        if (target.getAttribute("data-sb-part") === "attempts") {
          mergeAttempts(target, part.content);
        } else {
          keepFocusReplace(target, part.content);
        }
      });
      markLive();
    });
  }

  var timers = {};
  function later(key, fn) {
    if (timers[key]) { return; }
    timers[key] = setTimeout(function () { timers[key] = null; fn(); }, 120);
  }

  function onTodo(data) {
    if (!data || typeof data.id !== "string") { return; }
    if (data.verb !== "heartbeat") { later("panel", refreshPanel); }
    var dialog = drawer();
    if (dialog && dialog.getAttribute("data-sb-todo") === data.id) {
      later("drawer", function () { refreshDrawer(data.id); });
    }
  }

  function refreshAll() {
    later("panel", refreshPanel);
    var dialog = drawer();
    var id = dialog && dialog.getAttribute("data-sb-todo");
    if (id) { later("drawer", function () { refreshDrawer(id); }); }
  }

  function connectLive(url) {
    if (!window.EventSource) { return; }
    var opened = false;
    var planned = false;
    var source = new EventSource(url);
    source.addEventListener("open", function () {
      if (opened && !planned) { refreshAll(); }  // frames may have been missed while away
      opened = true;
      planned = false;
      document.body.setAttribute("data-sb-live-open", "1");
    });
    source.addEventListener("todo", function (e) {
      var data = null;
      try { data = JSON.parse(e.data); } catch (err) { return; }
      onTodo(data);
    });
    source.addEventListener("endpoint", refreshAll);
    source.addEventListener("bye", function () { planned = true; });
  }

  // --------------------------------------------------------------------- forms and buttons

  function checkJson(el) {
    var msg = byId(el.id + "-msg");
    var text = el.value.trim();
    var ok = true;
    var note = "";
    if (text) {
      try { JSON.parse(text); note = "Valid JSON."; } catch (err) { ok = false; note = "Not valid JSON: " + err.message; }
    } else if (el.required) {
      ok = false;
      note = "JSON is required here.";
    }
    if (ok) { el.removeAttribute("aria-invalid"); } else { el.setAttribute("aria-invalid", "true"); }
    if (msg) { msg.textContent = note; }
    return ok;
  }

  function copy(button) {
    var source = byId(button.getAttribute("data-sb-copy"));
    var status = byId("sb-copy-status");
    var text = source ? source.textContent : "";
    function say(words) { if (status) { status.textContent = words; } }
    function select() {
      var range = document.createRange();
      range.selectNodeContents(source);
      var sel = window.getSelection();
      sel.removeAllRanges();
      sel.addRange(range);
      say("Selected: press Ctrl+C (or Cmd+C) to copy.");
    }
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(function () { say("Copied to the clipboard."); }, select);
    } else {
      select();
    }
  }

  function init() {
    overlay = byId("sb-overlay");
    var first = document.querySelector("[data-sb-focus]");
    if (first) { first.focus(); }

    document.addEventListener("click", function (e) {
      var t = e.target;
      if (!(t instanceof Element)) { return; }
      var closer = t.closest("[data-sb-close]");
      if (closer) {
        var d = closer.closest("dialog");
        if (d) { d.close(); }
        return;
      }
      if (t.matches("dialog[data-sb-drawer]")) { t.close(); return; }  // a click on the backdrop
      var copier = t.closest("[data-sb-copy]");
      if (copier) { copy(copier); }
    });

    document.addEventListener("input", function (e) {
      var t = e.target;
      if (t instanceof Element && t.matches("textarea[data-sb-json]")) { checkJson(t); }
    });

    document.addEventListener("submit", function (e) {
      var form = e.target;
      if (!(form instanceof HTMLFormElement)) { return; }
      var bad = Array.prototype.filter.call(form.querySelectorAll("textarea[data-sb-json]"), function (el) {
        return !checkJson(el);
      });
      if (bad.length) {
        e.preventDefault();
        e.stopPropagation();
        bad[0].focus();
      }
    }, true);

    if (overlay) {
      overlay.addEventListener("close", onDrawerClosed, true);
    }

    document.body.addEventListener("htmx:beforeRequest", function (e) {
      if (e.detail && e.detail.target === overlay && e.detail.elt && e.detail.elt.id) {
        openerId = e.detail.elt.id;
      }
    });

    document.body.addEventListener("htmx:afterSwap", function (e) {
      var target = e.detail && e.detail.target;
      if (!target) { return; }
      if (target === overlay || target.id === "sb-drawer-content") { renders.drawer++; }
      if (target === overlay) {
        openDrawer();
      } else if (target.id === "sb-drawer-content") {
        var f = target.querySelector("[data-sb-focus]") || byId("sb-drawer-title");
        if (f) { f.focus(); }
      }
    });

    var live = document.body.getAttribute("data-sb-live");
    if (live) { connectLive(live); }
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
}());
