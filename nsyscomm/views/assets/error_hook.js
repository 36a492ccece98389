(function(){var d=document.documentElement;d.setAttribute('data-errors','');
function rec(m){var p=d.getAttribute('data-errors');d.setAttribute('data-errors',(p?p+' | ':'')+m);}
window.addEventListener('error',function(e){rec(e.message?('error: '+e.message+' @'+(e.lineno||0)):
 ('load failed: '+((e.target&&(e.target.src||e.target.href))||'?')));},true);
window.addEventListener('unhandledrejection',function(e){rec('rejection: '+e.reason);});
document.addEventListener('securitypolicyviolation',function(e){rec('csp: '+e.blockedURI);});
var ce=console.error;console.error=function(){rec('console: '+Array.prototype.join.call(arguments,' '));
 return ce.apply(console,arguments);};})();
