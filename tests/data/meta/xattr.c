/* xattr.c — a tiny static tool the t0540 test puts in its busybox base
 * (busybox has no setcap/setfattr/getfattr):
 *   xattr set PATH NAME HEX   setxattr (HEX "-" for an empty value)
 *   xattr get PATH NAME       print the value in hex
 *   xattr sock PATH           leave a bound unix socket at PATH */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/xattr.h>

int main(int argc, char **argv)
{
	unsigned char v[65536];
	size_t n = 0;

	if (argc == 5 && strcmp(argv[1], "set") == 0) {
		for (const char *h = argv[4]; strcmp(argv[4], "-") && h[0] && h[1] && n < sizeof(v); h += 2) {
			char b[3] = { h[0], h[1], 0 };
			v[n++] = (unsigned char)strtoul(b, NULL, 16);
		}
		if (lsetxattr(argv[2], argv[3], v, n, 0) < 0) {
			perror("setxattr");
			return 1;
		}
		return 0;
	}
	if (argc == 4 && strcmp(argv[1], "get") == 0) {
		ssize_t r = lgetxattr(argv[2], argv[3], v, sizeof(v));
		if (r < 0) {
			perror("getxattr");
			return 1;
		}
		for (ssize_t i = 0; i < r; i++)
			printf("%02x", v[i]);
		printf("\n");
		return 0;
	}
	if (argc == 3 && strcmp(argv[1], "sock") == 0) {
		struct sockaddr_un a = { .sun_family = AF_UNIX };
		int fd = socket(AF_UNIX, SOCK_STREAM, 0);
		snprintf(a.sun_path, sizeof(a.sun_path), "%s", argv[2]);
		return fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0;
	}
	fprintf(stderr, "usage: xattr set PATH NAME HEX | get PATH NAME | sock PATH\n");
	return 2;
}
