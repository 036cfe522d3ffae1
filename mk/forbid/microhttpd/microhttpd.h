/* Only the HTTP front (server/http/) includes libmicrohttpd: every other
 * layer is compiled with this folder ahead of the system's, so that
 * including it there stops the build (Makefile, "Layers"). */
#error "microhttpd.h belongs to the HTTP front (server/http/) alone: handlers take a struct request_view and return a struct answer (server/handlers/h_answer.h)"
