/* Only the mirror (mirror/) includes libcurl, its upstream's HTTP client:
 * every other layer is compiled with this folder ahead of the system's, so
 * that including it there stops the build (Makefile, "Layers"). */
#error "curl/curl.h belongs to the mirror's upstream client (mirror/upstream.c) alone"
