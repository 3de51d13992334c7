// Review page behaviour. Without JavaScript every part still works: each pointed-at span is a visible <mark>,
// every action is a form, the reject form asks for confirmation on a page of its own.
// Listeners sit on the document, so regions swapped in by htmx work without rebinding.
(function () {
  // ---- hovering or focusing a slot row lights up the conversation span its pointer names ----
  // Rows carry data-pointer="turn:start:end ..."; each <mark> carries data-spans with the pointers covering it.
  function light(row, on) {
    document.querySelectorAll("mark.lit").forEach(function (m) { m.classList.remove("lit"); });
    if (!on || !row) return;
    row.dataset.pointer.split(" ").forEach(function (id) {
      document.querySelectorAll('mark[data-spans~="' + id + '"]').forEach(function (m, i) {
        m.classList.add("lit");
        if (i === 0) m.scrollIntoView({ block: "nearest" });
      });
    });
  }
  function rowOf(event) { return event.target.closest && event.target.closest("tr[data-pointer]"); }
  document.addEventListener("mouseover", function (e) { var r = rowOf(e); if (r) light(r, true); });
  document.addEventListener("mouseout", function (e) { var r = rowOf(e); if (r) light(r, false); });
  document.addEventListener("focusin", function (e) { var r = rowOf(e); if (r) light(r, true); });
  document.addEventListener("focusout", function (e) { var r = rowOf(e); if (r) light(r, false); });

  // ---- keyboard shortcuts (listed on the page) ----
  var lastKey = null; // the slot row selected last, focused again after a swap replaced it
  function rows() { return Array.prototype.slice.call(document.querySelectorAll("tr.slot[data-key]")); }
  function current() {
    var el = document.activeElement;
    return el && el.closest ? el.closest("tr.slot[data-key]") : null;
  }
  function select(row) {
    if (!row) return;
    lastKey = row.dataset.key;
    row.focus();
    row.scrollIntoView({ block: "nearest" });
  }
  function move(step) {
    var all = rows();
    if (!all.length) return;
    var at = all.indexOf(current());
    select(all[at < 0 ? (step > 0 ? 0 : all.length - 1) : Math.min(all.length - 1, Math.max(0, at + step))]);
  }
  function press(selector, scope) {
    var button = (scope || document).querySelector(selector);
    if (button && !button.disabled) button.click();
  }
  function typing(el) {
    return el && (el.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(el.tagName));
  }
  document.addEventListener("keydown", function (e) {
    if (e.ctrlKey || e.metaKey || e.altKey || typing(e.target) || !document.getElementById("review")) return;
    if (e.key === "j") move(1);
    else if (e.key === "k") move(-1);
    else if (e.key === "a") { var row = current(); if (row) { lastKey = row.dataset.key; press("button.approve", row); } }
    else if (e.key === "A") press('[data-testid="approve-execution"]');
    else if (e.key === "r") { var reason = document.querySelector("form.reject textarea"); if (reason) reason.focus(); }
    else if (e.key === "n") { var next = document.querySelector('a[rel="next"]'); if (next) next.click(); }
    else return;
    e.preventDefault();
  });
  document.addEventListener("focusin", function (e) {
    var row = e.target.closest && e.target.closest("tr.slot[data-key]");
    if (row) lastKey = row.dataset.key;
  });
  document.addEventListener("htmx:afterSwap", function () {
    if (!lastKey) return;
    var row = document.querySelector('tr.slot[data-key="' + CSS.escape(lastKey) + '"]');
    if (row && !document.querySelector("#review :focus")) row.focus({ preventScroll: true });
  });

  // ---- the live poll never swaps the page under a reviewer's hands ----
  // While a field of the review has focus or an edit is open, skip this round; the next one catches up.
  document.addEventListener("htmx:beforeRequest", function (e) {
    if (!e.detail.elt || e.detail.elt.id !== "live") return;
    var busy = document.querySelector("#review details[open] form.edit, #review textarea:focus, #review input:focus");
    var reason = document.querySelector("form.reject textarea");
    if (busy || (reason && reason.value)) e.preventDefault();
  });
})();
