/* oomguide: the language switcher keeps the reader's section, and makes no request that misses.

   mkdocs-static-i18n points each language's link (in the selector, and <link rel="alternate" hreflang>
   in the head) at this page in that language: /de/estimate-loss-oom/ from /ja/estimate-loss-oom/.
   Every heading has the same anchor in every language, so the section the reader is on (location.hash)
   is added to the selector's links: /de/estimate-loss-oom/#recommended-fixes.

   Material's selector was made for alternates at language roots: at DOMContentLoaded it fetches
   sitemap.xml beside each <link rel="alternate"> (/de/estimate-loss-oom/sitemap.xml: a 404 on every
   page but the home page) to find the same page under that root. Here the links already are the same
   page, so the head's alternates are held out of the document while Material looks for them, and put
   back right after (this script runs before DOMContentLoaded, and its listener after Material's). */
(function () {
  "use strict";
  var head = document.head;
  var alternates = Array.prototype.slice.call(head.querySelectorAll('link[rel="alternate"][hreflang]'));
  var marker = document.createComment("alternates");
  if (alternates.length) {
    head.insertBefore(marker, alternates[0]);
    alternates.forEach(function (link) { head.removeChild(link); });
  }

  function keepSection() {
    var links = document.querySelectorAll(".md-select__link[hreflang]");
    Array.prototype.forEach.call(links, function (a) { a.hash = location.hash; });
  }

  document.addEventListener("DOMContentLoaded", function () {
    alternates.forEach(function (link) { head.insertBefore(link, marker); });
    if (marker.parentNode) head.removeChild(marker);
    keepSection();
  }, { once: true });
  window.addEventListener("hashchange", keepSection);
  // a click on a heading's permalink or the table of contents changes the hash; a click on the selector
  // itself takes the hash of the moment
  document.addEventListener("click", function (event) {
    if (event.target instanceof Element && event.target.closest(".md-select__link[hreflang]")) keepSection();
  }, true);
})();
