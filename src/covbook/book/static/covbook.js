// covbook: give every cell of a table the name of its column (data-label), so that on a phone,
// where covbook.css stacks a table's rows, each value is shown with what it is.
document.addEventListener("DOMContentLoaded", () => {
  for (const table of document.querySelectorAll(".bd-article table")) {
    const rows = [...table.querySelectorAll("thead tr")];
    const head = rows.reduce((a, b) => (b.children.length >= (a ? a.children.length : 0) ? b : a), null);
    const heads = head ? [...head.children].map(th => th.textContent.trim()) : [];
    if (!heads.length) continue;
    for (const row of table.querySelectorAll("tbody tr")) {
      [...row.children].forEach((cell, i) => { if (heads[i]) cell.dataset.label = heads[i]; });
    }
  }
});
