(function(){
var data=JSON.parse(document.getElementById('nsyscomm-data').textContent);
window.nsyscomm=data;
function key(td){var v=td.getAttribute('data-v');if(v!==null&&v!==''){var f=parseFloat(v);if(!isNaN(f))return f;}
 return td.textContent;}
Array.prototype.forEach.call(document.querySelectorAll('table.sortable'),function(t){
 var ths=t.tHead?t.tHead.rows[0].cells:[];
 Array.prototype.forEach.call(ths,function(th,i){th.addEventListener('click',function(){
  var asc=!th.classList.contains('sorted-asc');
  Array.prototype.forEach.call(ths,function(h){h.classList.remove('sorted-asc','sorted-desc');});
  th.classList.add(asc?'sorted-asc':'sorted-desc');
  var body=t.tBodies[0],rows=Array.prototype.slice.call(body.rows);
  rows.sort(function(a,b){var x=key(a.cells[i]),y=key(b.cells[i]);
   if(typeof x==='number'&&typeof y==='number')return asc?x-y:y-x;
   x=String(x);y=String(y);return asc?x.localeCompare(y):y.localeCompare(x);});
  rows.forEach(function(r){body.appendChild(r);});});});});
document.documentElement.setAttribute('data-ready', String(data.summary.length>=0 ? 1 : 0));
})();
