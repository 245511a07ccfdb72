# Runs last: any page that still holds a {{ placeholder }} that no gen script filled fails the build.
from distlab.site import check_unprocessed_pages

check_unprocessed_pages()
