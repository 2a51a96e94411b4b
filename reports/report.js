(function () {
  "use strict";
  // Static code only: the report's data is read from the DOM, never interpolated here (CSP pins this text's hash).
  var doc = document;
  var each = function (selector, fn) { Array.prototype.forEach.call(doc.querySelectorAll(selector), fn); };

  // Events table: filter by text and kind.
  var box = doc.getElementById("ev-filter");
  var kind = doc.getElementById("ev-kind");
  var count = doc.getElementById("ev-count");
  var rows = Array.prototype.slice.call(doc.querySelectorAll("#events tbody tr"));
  var texts = rows.map(function (tr) { return tr.textContent.toLowerCase(); });
  function apply() {
    var q = box.value.toLowerCase();
    var k = kind.value;
    var shown = 0;
    rows.forEach(function (tr, i) {
      var ok = (!k || tr.getAttribute("data-kind") === k) && (!q || texts[i].indexOf(q) !== -1);
      tr.hidden = !ok;
      if (ok) { shown += 1; }
    });
    count.textContent = shown + " of " + rows.length + " rows shown";
  }
  if (box && kind && count) {
    each(".filter", function (el) { el.hidden = false; });
    box.addEventListener("input", apply);
    kind.addEventListener("change", apply);
    apply();
  }

  // Copy buttons for the fix and commands.
  function copied(button) {
    button.textContent = "Copied";
    setTimeout(function () { button.textContent = "Copy"; }, 1500);
  }
  function fallback(pre, button) {
    var range = doc.createRange();
    range.selectNodeContents(pre);
    var sel = window.getSelection();
    sel.removeAllRanges();
    sel.addRange(range);
    try { if (doc.execCommand("copy")) { copied(button); } } catch (e) { /* text stays selected */ }
  }
  each("pre.copy", function (pre) {
    var button = doc.createElement("button");
    button.type = "button";
    button.className = "copy-btn";
    button.textContent = "Copy";
    button.addEventListener("click", function () {
      var text = pre.textContent;
      if (navigator.clipboard && navigator.clipboard.writeText) {
        navigator.clipboard.writeText(text).then(function () { copied(button); }, function () { fallback(pre, button); });
      } else {
        fallback(pre, button);
      }
    });
    pre.parentNode.insertBefore(button, pre);
  });

  // Printing: show every collapsed section, then restore.
  window.addEventListener("beforeprint", function () {
    each("details:not([open])", function (d) { d.setAttribute("data-closed", ""); d.open = true; });
  });
  window.addEventListener("afterprint", function () {
    each("details[data-closed]", function (d) { d.removeAttribute("data-closed"); d.open = false; });
  });

  doc.documentElement.setAttribute("data-js", "ready");
}());
