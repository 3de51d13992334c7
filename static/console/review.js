// Review page: while a slot row is hovered or focused, light up the conversation span its pointer names.
// Rows carry data-pointer="turn:start:end ..."; each <mark> in the conversation carries data-spans with the
// pointers covering it. Listeners sit on the document, so rows swapped in by htmx work without rebinding.
// Without JavaScript every pointed-at span is still a visible <mark>.
(function () {
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
})();
