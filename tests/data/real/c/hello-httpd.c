/* hello-httpd PORT — answers every HTTP request on 127.0.0.1:PORT with a
 * fixed page: the service of the corpus's multi-stage C build. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	static const char reply[] = "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nhello from c\n";
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(argc > 1 ? atoi(argv[1]) : 8080) };
	int one = 1, s = socket(AF_INET, SOCK_STREAM, 0);

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(s, 16) < 0) {
		perror("hello-httpd");
		return 1;
	}
	for (;;) {
		char buf[4096];
		int c = accept(s, NULL, NULL);
		if (c < 0)
			continue;
		if (read(c, buf, sizeof(buf)) > 0 && write(c, reply, sizeof(reply) - 1) < 0)
			perror("hello-httpd: write");
		close(c);
	}
}
