/* fuzz_agent_frame.c — arbitrary bytes as an agent connection stream: the
 * framer reassembles them (fed in uneven pieces) and every frame goes through
 * the payload decoder for its type, exactly as the agent and the host parse
 * what the other side sends.  Nothing may crash, leak or read out of bounds. */
#include <stdint.h>
#include <string.h>

#include "guest/guest.h"

static void decode_all(const struct guest_frame *f)
{
	const char *why = NULL;

	switch (f->type) {
	case GUEST_F_HELLO: {
		struct guest_hello m;
		if (guest_decode_hello(f->payload, f->len, &m, &why) == 0)
			guest_hello_free(&m);
		break;
	}
	case GUEST_F_EXEC: {
		struct guest_exec_req m;
		if (guest_decode_exec(f->payload, f->len, &m, &why) == 0) {
			/* Re-encoding a decoded request must decode to the same thing. */
			struct guest_wbuf w = { 0 };
			struct guest_exec_req m2;
			guest_encode_exec(&w, 1, &m);
			if (!w.failed && guest_decode_exec(w.data + GUEST_HDR_LEN, w.len - GUEST_HDR_LEN, &m2, &why) == 0) {
				if (m2.argc != m.argc || strcmp(m2.argv[0], m.argv[0]) != 0)
					__builtin_trap();
				guest_exec_req_free(&m2);
			}
			guest_wbuf_free(&w);
			guest_exec_req_free(&m);
		}
		break;
	}
	case GUEST_F_EXIT: {
		struct guest_exit m;
		guest_decode_exit(f->payload, f->len, &m, &why);
		break;
	}
	case GUEST_F_UPLOAD:
	case GUEST_F_DOWNLOAD: {
		struct guest_xfer_req m;
		if (guest_decode_xfer(f->payload, f->len, &m, &why) == 0)
			guest_xfer_req_free(&m);
		break;
	}
	case GUEST_F_STAT: {
		struct guest_stat_req m;
		if (guest_decode_stat_req(f->payload, f->len, &m, &why) == 0)
			guest_stat_req_free(&m);
		break;
	}
	case GUEST_F_IDENTITY: {
		struct guest_identity m;
		if (guest_decode_identity(f->payload, f->len, &m, &why) == 0)
			guest_identity_free(&m);
		break;
	}
	case GUEST_F_STAT_REPLY: {
		struct guest_stat m;
		if (guest_decode_stat(f->payload, f->len, &m, &why) == 0)
			guest_stat_free(&m);
		break;
	}
	case GUEST_F_ERROR: {
		struct guest_error_msg m;
		if (guest_decode_error(f->payload, f->len, &m, &why) == 0)
			guest_error_msg_free(&m);
		break;
	}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct guest_framer fr;
	struct guest_frame f;
	const char *why = NULL;
	size_t off = 0, step = 1;

	guest_framer_init(&fr);
	while (off < size) {
		size_t room, n;
		uint8_t *space = guest_framer_space(&fr, &room);
		int r;
		if (space == NULL)
			break;
		n = size - off < step ? size - off : step;
		n = n < room ? n : room;
		memcpy(space, data + off, n);
		guest_framer_commit(&fr, n);
		off += n;
		step = step * 3 + 1; /* 1, 4, 13, ... bytes: frames straddle reads */
		while ((r = guest_framer_next(&fr, &f, &why)) > 0)
			decode_all(&f);
		if (r < 0)
			break;
	}
	guest_framer_free(&fr);
	return 0;
}
