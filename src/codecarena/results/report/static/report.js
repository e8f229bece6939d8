document.querySelectorAll('table.sortable').forEach(function (table) {
  table.querySelectorAll('thead th').forEach(function (th, col) {
    th.addEventListener('click', function () {
      var body = table.tBodies[0];
      var rows = Array.prototype.slice.call(body.rows);
      var dir = th.dataset.dir === 'asc' ? -1 : 1;
      th.dataset.dir = dir === 1 ? 'asc' : 'desc';
      rows.sort(function (a, b) {
        var x = a.cells[col], y = b.cells[col];
        var vx = x.dataset.v, vy = y.dataset.v;
        if (vx !== undefined && vy !== undefined) {
          var nx = vx === '' ? Infinity : parseFloat(vx), ny = vy === '' ? Infinity : parseFloat(vy);
          return dir * (nx - ny);
        }
        return dir * x.textContent.localeCompare(y.textContent);
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
});

// Column groups (rate, quality, content, cost, checks) shown or hidden per leaderboard.
document.querySelectorAll('div.columns').forEach(function (bar) {
  var table = bar.nextElementSibling.querySelector('table.leaderboard');
  bar.querySelectorAll('input[data-toggle]').forEach(function (box) {
    box.addEventListener('change', function () {
      table.querySelectorAll('thead th').forEach(function (th, col) {
        if (th.dataset.colGroup !== box.dataset.toggle) { return; }
        var shown = box.checked ? '' : 'none';
        th.style.display = shown;
        Array.prototype.forEach.call(table.tBodies[0].rows, function (row) { row.cells[col].style.display = shown; });
      });
    });
  });
});
