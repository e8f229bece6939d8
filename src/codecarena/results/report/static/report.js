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
