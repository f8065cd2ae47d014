/* proto.c — the agent protocol's framing: frame headers, reassembly of frames
 * from a byte stream, and an output buffer that frames and TLV fields are
 * built in.  libc only: this file is linked into the static agent as well. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "guest/guest.h"

uint32_t guest_get_u32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

void guest_put_u32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

void guest_hdr_encode(uint8_t out[GUEST_HDR_LEN], uint8_t type, uint32_t id, uint32_t len)
{
	out[0] = (uint8_t)(GUEST_FRAME_MAGIC >> 8);
	out[1] = (uint8_t)(GUEST_FRAME_MAGIC & 0xff);
	out[2] = type;
	out[3] = 0;
	guest_put_u32(out + 4, id);
	guest_put_u32(out + 8, len);
}

int guest_hdr_decode(const uint8_t in[GUEST_HDR_LEN], struct guest_frame *f, const char **why)
{
	if (((unsigned)in[0] << 8 | in[1]) != GUEST_FRAME_MAGIC) {
		*why = "bad frame magic (stream out of sync or not the kiln agent)";
		return -1;
	}
	if (in[3] != 0) {
		*why = "reserved frame flags are set";
		return -1;
	}
	f->type = in[2];
	f->id = guest_get_u32(in + 4);
	f->len = guest_get_u32(in + 8);
	f->payload = NULL;
	if (f->len > GUEST_MAX_PAYLOAD) {
		*why = "frame larger than the 1 MiB limit";
		return -1;
	}
	return 0;
}

/* ---- reassembly ---------------------------------------------------------- */

void guest_framer_init(struct guest_framer *fr)
{
	memset(fr, 0, sizeof(*fr));
}

void guest_framer_free(struct guest_framer *fr)
{
	free(fr->buf);
	guest_framer_init(fr);
}

void guest_framer_reset(struct guest_framer *fr)
{
	fr->off = fr->len = 0;
}

uint8_t *guest_framer_space(struct guest_framer *fr, size_t *room)
{
	/* Consumed bytes are dropped lazily, so a burst of small frames costs one move. */
	if (fr->off > 0 && (fr->off == fr->len || fr->off >= fr->cap / 2)) {
		memmove(fr->buf, fr->buf + fr->off, fr->len - fr->off);
		fr->len -= fr->off;
		fr->off = 0;
	}
	if (fr->cap - fr->len < 16384) {
		/* Never more than one maximal frame plus a read's worth is buffered. */
		size_t ncap = fr->cap ? fr->cap * 2 : 65536;
		uint8_t *nb;
		if (ncap > GUEST_HDR_LEN + GUEST_MAX_PAYLOAD + 65536)
			ncap = GUEST_HDR_LEN + GUEST_MAX_PAYLOAD + 65536;
		if (ncap > fr->cap) {
			nb = realloc(fr->buf, ncap);
			if (nb == NULL)
				return NULL;
			fr->buf = nb;
			fr->cap = ncap;
		}
	}
	*room = fr->cap - fr->len;
	if (*room == 0)
		return NULL;
	return fr->buf + fr->len;
}

void guest_framer_commit(struct guest_framer *fr, size_t n)
{
	fr->len += n;
}

int guest_framer_next(struct guest_framer *fr, struct guest_frame *f, const char **why)
{
	size_t avail = fr->len - fr->off;

	if (avail < GUEST_HDR_LEN)
		return 0;
	if (guest_hdr_decode(fr->buf + fr->off, f, why) < 0)
		return -1;
	if (avail - GUEST_HDR_LEN < f->len)
		return 0;
	f->payload = fr->buf + fr->off + GUEST_HDR_LEN;
	fr->off += GUEST_HDR_LEN + f->len;
	return 1;
}

/* ---- building frames ----------------------------------------------------- */

void guest_wbuf_free(struct guest_wbuf *w)
{
	free(w->data);
	memset(w, 0, sizeof(*w));
}

uint8_t *guest_wbuf_reserve(struct guest_wbuf *w, size_t n)
{
	if (w->failed)
		return NULL;
	if (w->cap - w->len < n) {
		size_t ncap = w->cap ? w->cap : 4096;
		uint8_t *nd;
		while (ncap - w->len < n)
			ncap *= 2;
		nd = realloc(w->data, ncap);
		if (nd == NULL) {
			w->failed = true;
			return NULL;
		}
		w->data = nd;
		w->cap = ncap;
	}
	return w->data + w->len;
}

void guest_wbuf_put(struct guest_wbuf *w, const void *p, size_t n)
{
	uint8_t *dst;

	if (n == 0 || (dst = guest_wbuf_reserve(w, n)) == NULL)
		return;
	memcpy(dst, p, n);
	w->len += n;
}

size_t guest_frame_begin(struct guest_wbuf *w, uint8_t type, uint32_t id)
{
	uint8_t hdr[GUEST_HDR_LEN];
	size_t start = w->len;

	guest_hdr_encode(hdr, type, id, 0);
	guest_wbuf_put(w, hdr, sizeof(hdr));
	return start;
}

int guest_frame_end(struct guest_wbuf *w, size_t start)
{
	size_t plen;

	if (w->failed)
		return -1;
	plen = w->len - start - GUEST_HDR_LEN;
	if (plen > GUEST_MAX_PAYLOAD) {
		w->len = start;
		return -1;
	}
	guest_put_u32(w->data + start + 8, (uint32_t)plen);
	return 0;
}

int guest_frame_raw(struct guest_wbuf *w, uint8_t type, uint32_t id, const void *p, size_t n)
{
	size_t start = guest_frame_begin(w, type, id);

	guest_wbuf_put(w, p, n);
	return guest_frame_end(w, start);
}

static void tlv_head(struct guest_wbuf *w, uint16_t tag, size_t n)
{
	uint8_t h[6];

	h[0] = (uint8_t)(tag >> 8);
	h[1] = (uint8_t)tag;
	guest_put_u32(h + 2, (uint32_t)n);
	guest_wbuf_put(w, h, sizeof(h));
}

void guest_tlv_bytes(struct guest_wbuf *w, uint16_t tag, const void *p, size_t n)
{
	if (n > GUEST_MAX_PAYLOAD) {
		w->failed = true;
		return;
	}
	tlv_head(w, tag, n);
	guest_wbuf_put(w, p, n);
}

void guest_tlv_str(struct guest_wbuf *w, uint16_t tag, const char *s)
{
	guest_tlv_bytes(w, tag, s, strlen(s));
}

void guest_tlv_u64(struct guest_wbuf *w, uint16_t tag, uint64_t v)
{
	uint8_t b[8];

	guest_put_u32(b, (uint32_t)(v >> 32));
	guest_put_u32(b + 4, (uint32_t)v);
	tlv_head(w, tag, 8);
	guest_wbuf_put(w, b, 8);
}

const char *guest_frame_name(uint8_t type, char buf[8])
{
	switch (type) {
	case GUEST_F_HELLO: return "HELLO";
	case GUEST_F_PING: return "PING";
	case GUEST_F_PONG: return "PONG";
	case GUEST_F_EXEC: return "EXEC";
	case GUEST_F_STDIN: return "STDIN";
	case GUEST_F_STDIN_EOF: return "STDIN_EOF";
	case GUEST_F_KILL: return "KILL";
	case GUEST_F_UPLOAD: return "UPLOAD";
	case GUEST_F_DOWNLOAD: return "DOWNLOAD";
	case GUEST_F_STAT: return "STAT";
	case GUEST_F_IDENTITY: return "IDENTITY";
	case GUEST_F_STARTED: return "STARTED";
	case GUEST_F_STDOUT: return "STDOUT";
	case GUEST_F_STDERR: return "STDERR";
	case GUEST_F_WINDOW: return "WINDOW";
	case GUEST_F_EXIT: return "EXIT";
	case GUEST_F_STAT_REPLY: return "STAT_REPLY";
	case GUEST_F_ERROR: return "ERROR";
	}
	snprintf(buf, 8, "0x%02x", type);
	return buf;
}
