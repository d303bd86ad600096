// SPDX-License-Identifier: MIT
/*
 * kvmm/owner.c - what the layer above the core holds on a context:
 * sequences, pins and deferred completions, recorded where the core can
 * count and release them without calling up.
 *
 * DOC: owners
 *
 * The dispatcher (disp/) sits above the core and the core never calls it.
 * Yet the core must know some of what a ring holds: kvmm_check() proves
 * every pin taken without KVMM_PIN_KEEP is held by exactly one ring,
 * PIN_DROP drops pins whoever took them, DUMP names a pin's ring, a
 * promotion completes to the ring that asked for it, and kvmm_destroy()
 * releases rings still attached.  So each ring's dispatcher embeds a
 * struct kvmm_owner and registers it on the context: sequences carry its
 * id, its pins are listed in it, and what the core must tell the layer
 * above (a completion, a release) goes through the owner's ops, which
 * that layer supplies.  The core knows an owner, never a ring.
 *
 * Everything here runs under ctx->lock.
 */
#include "internal.h"

/**
 * kvmm_owner_add() - register an owner on the context
 * @ctx: the context
 * @o: the owner, zeroed, in the caller's memory
 * @ops: how the core calls back
 *
 * Gives it an id, 1 up (0 is the direct API).
 *
 * Context: ctx->lock held.
 */
void kvmm_owner_add(struct kvmm_ctx *ctx, struct kvmm_owner *o,
		    const struct kvmm_owner_ops *ops)
{
	o->id = ++ctx->next_owner_id;
	o->ops = ops;
	list_add_tail(&o->link, &ctx->owners);
}

/**
 * kvmm_owner_del() - give back everything @o holds and unregister it
 * @ctx: the context
 * @o: a registered owner
 *
 * Its sequences are closed without commit (their committed pages stay
 * cached), its promotions complete to nobody, its pins are dropped.
 *
 * Context: ctx->lock held.
 */
void kvmm_owner_del(struct kvmm_ctx *ctx, struct kvmm_owner *o)
{
	uint32_t i;

	for (i = 0; i < ctx->max_seqs; i++) {
		if (ctx->seqs[i].open && ctx->seqs[i].owner == o->id)
			kvmm_seq_close(ctx, i, NULL, 0);
	}
	kvmm_promos_forget(ctx, o);
	kvmm_keyed_forget(ctx, o);
	kvmm_remote_forget(ctx, o);
	while (o->nr_pins)
		kvmm_node_unpin(ctx, o->pins[--o->nr_pins], false);
	kvmm_mfree(ctx, o->pins, o->cap_pins * sizeof(*o->pins));
	o->pins = NULL;
	o->cap_pins = 0;
	list_del(&o->link);
}

/* kvmm_destroy(): owners still registered are released by their layer. */
void kvmm_owners_release(struct kvmm_ctx *ctx)
{
	while (!list_empty(&ctx->owners)) {
		struct kvmm_owner *o = list_entry(ctx->owners.next, struct kvmm_owner, link);

		if (o->ops && o->ops->release)
			o->ops->release(o);
		else
			kvmm_owner_del(ctx, o);
	}
}

/**
 * kvmm_owner_complete() - post a deferred command's result to its owner
 * @o: the owner that deferred it
 * @user_data: the command's user_data
 * @res: its result
 *
 * Context: ctx->lock held.
 */
void kvmm_owner_complete(struct kvmm_owner *o, uint64_t user_data, int32_t res)
{
	o->ops->complete(o, user_data, res);
}

/**
 * kvmm_owner_reserve_pin() - make room to record one more pin
 * @ctx: the context
 * @o: the owner
 *
 * Called before the pin is taken, so taking it and recording it cannot
 * fail half way.
 *
 * Return: 0, or -ENOMEM.
 */
int kvmm_owner_reserve_pin(struct kvmm_ctx *ctx, struct kvmm_owner *o)
{
	struct kvmm_node **p;
	uint32_t cap;

	if (o->nr_pins < o->cap_pins)
		return 0;
	cap = o->cap_pins ? o->cap_pins * 2 : 8;
	p = kvmm_malloc(ctx, cap * sizeof(*p));
	if (!p)
		return -ENOMEM;
	if (o->pins)
		memcpy(p, o->pins, o->nr_pins * sizeof(*p));
	kvmm_mfree(ctx, o->pins, o->cap_pins * sizeof(*p));
	o->pins = p;
	o->cap_pins = cap;
	return 0;
}

/* Record a pin ending at @node, after kvmm_owner_reserve_pin(). */
void kvmm_owner_add_pin(struct kvmm_owner *o, struct kvmm_node *node)
{
	o->pins[o->nr_pins++] = node;
}

/*
 * Forget one of @o's pins ending at @node (the caller unpins it).
 * Return: false if @o holds none there.
 */
bool kvmm_owner_del_pin(struct kvmm_owner *o, const struct kvmm_node *node)
{
	uint32_t i;

	for (i = 0; i < o->nr_pins && o->pins[i] != node; i++)
		;
	if (i == o->nr_pins)
		return false;
	o->pins[i] = o->pins[--o->nr_pins];
	return true;
}

/* kvmm_check(): how many owners' pins end at @node. */
uint64_t kvmm_owners_pins_on(const struct kvmm_ctx *ctx, const struct kvmm_node *node)
{
	const struct kvmm_list *pos;
	uint64_t n = 0;
	uint32_t i;

	list_for_each(pos, &ctx->owners) {
		const struct kvmm_owner *o = list_entry(pos, struct kvmm_owner, link);

		for (i = 0; i < o->nr_pins; i++)
			n += o->pins[i] == node;
	}
	return n;
}

/* The id of the owner of one of the pins ending at @node, 0 if none. */
uint32_t kvmm_pin_owner(const struct kvmm_ctx *ctx, const struct kvmm_node *node)
{
	const struct kvmm_list *pos;
	uint32_t i;

	list_for_each(pos, &ctx->owners) {
		const struct kvmm_owner *o = list_entry(pos, struct kvmm_owner, link);

		for (i = 0; i < o->nr_pins; i++)
			if (o->pins[i] == node)
				return o->id;
	}
	return 0;
}

/**
 * kvmm_pins_drop_node() - drop every pin ending at @node
 * @ctx: the context
 * @node: a pinned node
 *
 * The owners' pins and the kept ones (nobody's) alike; an owner whose
 * pin was dropped finds it gone.
 *
 * Context: ctx->lock held.
 * Return: pins dropped.
 */
uint32_t kvmm_pins_drop_node(struct kvmm_ctx *ctx, struct kvmm_node *node)
{
	struct kvmm_list *pos;
	uint32_t n = 0;

	list_for_each(pos, &ctx->owners) {
		struct kvmm_owner *o = list_entry(pos, struct kvmm_owner, link);

		while (kvmm_owner_del_pin(o, node)) {
			kvmm_node_unpin(ctx, node, false);
			n++;
		}
	}
	while (node->keep_pins) {
		kvmm_node_unpin(ctx, node, true);
		n++;
	}
	return n;
}
