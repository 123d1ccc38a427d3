// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The Ethernet function: the frames on softirdma's link that are not RoCEv2 for the device
 * reach this net_device through the RX ring, and what it sends goes out through the TX ring
 * (docs/device.md, "The Ethernet function"). One NAPI context serves both rings.
 */
#include <linux/dma-mapping.h>
#include <linux/etherdevice.h>
#include <linux/if_vlan.h>
#include <linux/interrupt.h>

#include "softirdma.h"

#define RING_MASK (SOFTIRDMA_ETH_RING_SIZE - 1)

static struct sirdma_dev *netdev_sdev(struct net_device *netdev)
{
	return ((struct sirdma_netdev_priv *)netdev_priv(netdev))->sdev;
}

static __le32 *ring_index(struct sirdma_eth_ring *r, u32 off)
{
	return r->mem + off;
}

static struct softirdma_eth_desc *ring_desc(struct sirdma_eth_ring *r, u32 i)
{
	return r->mem + SOFTIRDMA_QUEUE_HEADER_SIZE + i * SOFTIRDMA_ETH_DESC_SIZE;
}

/*
 * The device's consumer index: how far it has sent (TX) or filled (RX). An index past what the
 * driver handed over (slots without a buffer) is not believed: the ring stands still.
 */
static u32 ring_consumer(struct sirdma_dev *sdev, struct sirdma_eth_ring *r)
{
	u32 done = le32_to_cpu(READ_ONCE(*ring_index(r, SOFTIRDMA_QH_CONSUMER))) & RING_MASK;

	if (((done - r->clean) & RING_MASK) > ((r->prod - r->clean) & RING_MASK)) {
		netdev_warn_once(sdev->netdev, "device consumer index %u past the driver's %u\n",
				 done, r->prod);
		return r->clean;
	}
	return done;
}

static void ring_publish(struct sirdma_eth_ring *r)
{
	dma_wmb(); /* the descriptors before the index that hands them over */
	WRITE_ONCE(*ring_index(r, SOFTIRDMA_QH_PRODUCER), cpu_to_le32(r->prod));
}

static int ring_alloc(struct sirdma_dev *sdev, struct sirdma_eth_ring *r)
{
	BUILD_BUG_ON(SOFTIRDMA_QUEUE_HEADER_SIZE +
		     SOFTIRDMA_ETH_RING_SIZE * SOFTIRDMA_ETH_DESC_SIZE > PAGE_SIZE);
	BUILD_BUG_ON(SOFTIRDMA_ETH_RING_LOG > SOFTIRDMA_ETH_MAX_LOG);
	r->mem = dma_alloc_coherent(&sdev->pdev->dev, PAGE_SIZE, &r->dma, GFP_KERNEL);
	if (!r->mem)
		return -ENOMEM;
	/* The header's element size and mask are the driver's to write, never the device's. */
	*ring_index(r, SOFTIRDMA_QH_LOG_ELEM_SIZE) = cpu_to_le32(ilog2(SOFTIRDMA_ETH_DESC_SIZE));
	*ring_index(r, SOFTIRDMA_QH_INDEX_MASK) = cpu_to_le32(RING_MASK);
	r->prod = 0;
	r->clean = 0;
	return 0;
}

static void ring_free(struct sirdma_dev *sdev, struct sirdma_eth_ring *r)
{
	if (r->mem)
		dma_free_coherent(&sdev->pdev->dev, PAGE_SIZE, r->mem, r->dma);
	r->mem = NULL;
}

static int ring_create(struct sirdma_dev *sdev, struct sirdma_eth_ring *r, u8 kind, u16 vector)
{
	struct softirdma_eth_ring_args args = {};
	struct softirdma_queue_args *q = (void *)args.queue;
	struct softirdma_page_list *pl = (void *)q->pages;

	args.kind = kind;
	args.vector = cpu_to_le16(vector);
	q->log_count = SOFTIRDMA_ETH_RING_LOG;
	q->log_elem = ilog2(SOFTIRDMA_ETH_DESC_SIZE);
	pl->addr = cpu_to_le64(r->dma);
	pl->pages = cpu_to_le32(1);
	pl->shift = PAGE_SHIFT;
	pl->levels = 0;
	return sirdma_cmd(sdev, SOFTIRDMA_OP_CREATE_ETH_RING, &args, sizeof(args), NULL, NULL, 0);
}

/* The caller frees the ring next. DESTROY_ETH_RING reads only the kind of the ring's arguments. */
static void ring_destroy(struct sirdma_dev *sdev, u8 kind)
{
	struct softirdma_eth_ring_args args = { .kind = kind };
	u32 res[SOFTIRDMA_CMD_RESULTS];
	u32 dropped;

	if (sirdma_let_go(sdev, SOFTIRDMA_OP_DESTROY_ETH_RING, &args, sizeof(args), res))
		return;
	dropped = res[SOFTIRDMA_RESULT_ETH_DROPPED];
	if (dropped)
		netdev_dbg(sdev->netdev, "%s ring dropped %u frames\n",
			   kind == SOFTIRDMA_ETH_TX ? "TX" : "RX", dropped);
}

/* rx_post gives the device an empty buffer in the RX ring's next slot. */
static int rx_post(struct sirdma_dev *sdev)
{
	struct sirdma_eth_ring *r = &sdev->rx;
	struct softirdma_eth_desc *d;
	struct sk_buff *skb;
	dma_addr_t addr;
	u32 i = r->prod;
	u32 len = max_t(u32, SOFTIRDMA_ETH_RX_BUF, sdev->netdev->mtu + ETH_HLEN + VLAN_HLEN);

	skb = netdev_alloc_skb_ip_align(sdev->netdev, len);
	if (!skb)
		return -ENOMEM;
	addr = dma_map_single(&sdev->pdev->dev, skb->data, len, DMA_FROM_DEVICE);
	if (dma_mapping_error(&sdev->pdev->dev, addr)) {
		dev_kfree_skb_any(skb);
		return -ENOMEM;
	}
	r->skbs[i] = skb;
	r->addrs[i] = addr;
	r->lens[i] = len;
	d = ring_desc(r, i);
	d->addr = cpu_to_le64(addr);
	d->len = cpu_to_le32(len);
	d->flags = 0;
	r->prod = (i + 1) & RING_MASK;
	return 0;
}

static int rx_poll(struct sirdma_dev *sdev, int budget)
{
	struct sirdma_eth_ring *r = &sdev->rx;
	struct net_device *netdev = sdev->netdev;
	u32 done = ring_consumer(sdev, r);
	int n = 0;

	while (r->clean != done && n < budget) {
		struct softirdma_eth_desc *d = ring_desc(r, r->clean);
		struct sk_buff *skb = r->skbs[r->clean];
		u32 len;

		dma_rmb(); /* the descriptor after the index that says it is filled */
		len = le32_to_cpu(d->len);
		dma_unmap_single(&sdev->pdev->dev, r->addrs[r->clean], r->lens[r->clean],
				 DMA_FROM_DEVICE);
		r->skbs[r->clean] = NULL;
		if (!(le32_to_cpu(d->flags) & SOFTIRDMA_ETH_DESC_DONE) || len < ETH_HLEN ||
		    len > r->lens[r->clean]) {
			netdev->stats.rx_dropped++;
			dev_kfree_skb_any(skb);
		} else {
			skb_put(skb, len);
			skb->protocol = eth_type_trans(skb, netdev);
			netdev->stats.rx_packets++;
			netdev->stats.rx_bytes += len;
			napi_gro_receive(&sdev->napi, skb);
		}
		r->clean = (r->clean + 1) & RING_MASK;
		n++;
	}
	/* Every free slot goes back with a fresh buffer, those a failed allocation left too. */
	while (((r->prod + 1) & RING_MASK) != r->clean) {
		if (rx_post(sdev)) {
			netdev->stats.rx_missed_errors++;
			break;
		}
	}
	ring_publish(r);
	return n;
}

static void tx_clean(struct sirdma_dev *sdev)
{
	struct sirdma_eth_ring *r = &sdev->tx;
	struct net_device *netdev = sdev->netdev;
	u32 done = ring_consumer(sdev, r);

	while (r->clean != done) {
		struct sk_buff *skb = r->skbs[r->clean];

		dma_unmap_single(&sdev->pdev->dev, r->addrs[r->clean], skb->len,
				 DMA_TO_DEVICE);
		netdev->stats.tx_packets++;
		netdev->stats.tx_bytes += skb->len;
		napi_consume_skb(skb, 1);
		r->skbs[r->clean] = NULL;
		r->clean = (r->clean + 1) & RING_MASK;
	}
	if (netif_queue_stopped(netdev) && ((r->prod + 1) & RING_MASK) != r->clean)
		netif_wake_queue(netdev);
}

static int sirdma_napi_poll(struct napi_struct *napi, int budget)
{
	struct sirdma_dev *sdev = container_of(napi, struct sirdma_dev, napi);
	struct sirdma_eth_ring *r = &sdev->rx;
	int n;

	spin_lock(&sdev->tx_lock);
	tx_clean(sdev);
	spin_unlock(&sdev->tx_lock);
	n = rx_poll(sdev, budget);
	/*
	 * With no buffer posted (every allocation failed: a jumbo MTU's take more than a page)
	 * no frame arrives to raise the RX interrupt: poll again until a refill succeeds.
	 */
	if (r->prod == r->clean)
		return budget;
	if (n < budget)
		napi_complete_done(napi, n);
	return n;
}

static irqreturn_t sirdma_eth_irq(int irq, void *data)
{
	struct sirdma_dev *sdev = data;

	napi_schedule(&sdev->napi);
	return IRQ_HANDLED;
}

static netdev_tx_t sirdma_xmit(struct sk_buff *skb, struct net_device *netdev)
{
	struct sirdma_dev *sdev = netdev_sdev(netdev);
	struct sirdma_eth_ring *r = &sdev->tx;
	struct softirdma_eth_desc *d;
	dma_addr_t addr;
	unsigned long flags;

	if (skb->len < SOFTIRDMA_ETH_MIN_FRAME || skb->len > SOFTIRDMA_ETH_MAX_FRAME ||
	    skb_linearize(skb)) {
		netdev->stats.tx_dropped++;
		dev_kfree_skb_any(skb);
		return NETDEV_TX_OK;
	}
	addr = dma_map_single(&sdev->pdev->dev, skb->data, skb->len, DMA_TO_DEVICE);
	if (dma_mapping_error(&sdev->pdev->dev, addr)) {
		netdev->stats.tx_dropped++;
		dev_kfree_skb_any(skb);
		return NETDEV_TX_OK;
	}
	spin_lock_irqsave(&sdev->tx_lock, flags);
	if (((r->prod + 1) & RING_MASK) == r->clean) {
		netif_stop_queue(netdev);
		spin_unlock_irqrestore(&sdev->tx_lock, flags);
		dma_unmap_single(&sdev->pdev->dev, addr, skb->len, DMA_TO_DEVICE);
		return NETDEV_TX_BUSY;
	}
	r->skbs[r->prod] = skb;
	r->addrs[r->prod] = addr;
	d = ring_desc(r, r->prod);
	d->addr = cpu_to_le64(addr);
	d->len = cpu_to_le32(skb->len);
	d->flags = 0;
	r->prod = (r->prod + 1) & RING_MASK;
	ring_publish(r);
	sirdma_wr(sdev, SOFTIRDMA_REG_ETH_TX_PROD, r->prod);
	if (((r->prod + 1) & RING_MASK) == r->clean)
		netif_stop_queue(netdev);
	spin_unlock_irqrestore(&sdev->tx_lock, flags);
	return NETDEV_TX_OK;
}

/* ring_drain frees what a ring still holds, once the device has let go of it. */
static void ring_drain(struct sirdma_dev *sdev, struct sirdma_eth_ring *r,
		       enum dma_data_direction dir)
{
	int i;

	for (i = 0; i < SOFTIRDMA_ETH_RING_SIZE; i++) {
		size_t len;

		if (!r->skbs[i])
			continue;
		len = dir == DMA_TO_DEVICE ? r->skbs[i]->len : r->lens[i];
		dma_unmap_single(&sdev->pdev->dev, r->addrs[i], len, dir);
		dev_kfree_skb_any(r->skbs[i]);
		r->skbs[i] = NULL;
	}
}

static int sirdma_open(struct net_device *netdev)
{
	struct sirdma_dev *sdev = netdev_sdev(netdev);
	int err, i;

	err = ring_alloc(sdev, &sdev->tx);
	if (err)
		return err;
	err = ring_alloc(sdev, &sdev->rx);
	if (err)
		goto err_tx;
	for (i = 0; i < SOFTIRDMA_ETH_RING_SIZE - 1; i++) {
		err = rx_post(sdev);
		if (err)
			goto err_rx;
	}
	ring_publish(&sdev->rx);
	err = ring_create(sdev, &sdev->tx, SOFTIRDMA_ETH_TX, SOFTIRDMA_ETH_TX_VECTOR);
	if (err)
		goto err_rx;
	err = ring_create(sdev, &sdev->rx, SOFTIRDMA_ETH_RX, SOFTIRDMA_ETH_RX_VECTOR);
	if (err)
		goto err_tx_ring;
	napi_enable(&sdev->napi);
	if (!READ_ONCE(sdev->failed) &&
	    sirdma_rd(sdev, SOFTIRDMA_REG_PORT_STATE) == SOFTIRDMA_PORT_ACTIVE)
		netif_carrier_on(netdev);
	netif_start_queue(netdev);
	WRITE_ONCE(sdev->rings_up, true);
	return 0;

err_tx_ring:
	ring_destroy(sdev, SOFTIRDMA_ETH_TX);
err_rx:
	ring_drain(sdev, &sdev->rx, DMA_FROM_DEVICE);
	ring_free(sdev, &sdev->rx);
err_tx:
	ring_free(sdev, &sdev->tx);
	return err;
}

static int sirdma_stop(struct net_device *netdev)
{
	struct sirdma_dev *sdev = netdev_sdev(netdev);

	if (!sdev->rings_up)
		return 0; /* a reopen after an MTU change failed: nothing is left to stop */
	WRITE_ONCE(sdev->rings_up, false);
	/*
	 * NAPI first: its TX clean would wake the queue. Then no transmit may be under way or
	 * start: an MTU change stops the rings with the qdisc still running.
	 */
	napi_disable(&sdev->napi);
	netif_tx_disable(netdev);
	netif_carrier_off(netdev);
	/* Once the rings are destroyed the device touches neither them nor their buffers. */
	ring_destroy(sdev, SOFTIRDMA_ETH_RX);
	ring_destroy(sdev, SOFTIRDMA_ETH_TX);
	ring_drain(sdev, &sdev->tx, DMA_TO_DEVICE);
	ring_drain(sdev, &sdev->rx, DMA_FROM_DEVICE);
	ring_free(sdev, &sdev->tx);
	ring_free(sdev, &sdev->rx);
	return 0;
}

/* MAC_LO holds the address's first bytes, MAC_HI the rest. */
#define MAC_LO_BYTES sizeof(u32)

/* mac_write gives the function its MAC: MAC_HI last, the device takes the address then. */
static void mac_write(struct sirdma_dev *sdev, const u8 *mac)
{
	sirdma_wr(sdev, SOFTIRDMA_REG_MAC_LO, get_unaligned_le32(mac));
	sirdma_wr(sdev, SOFTIRDMA_REG_MAC_HI, get_unaligned_le16(mac + MAC_LO_BYTES));
}

static int sirdma_set_mac(struct net_device *netdev, void *p)
{
	struct sirdma_dev *sdev = netdev_sdev(netdev);
	int err = eth_mac_addr(netdev, p);

	if (err)
		return err;
	mac_write(sdev, netdev->dev_addr);
	return 0;
}

/*
 * The posted RX buffers are sized for the MTU they were posted under, and a frame of a larger MTU
 * would be dropped by each of them until all came back: a running netdev's rings go and come
 * back with buffers of the new size, as a NIC resets its rings. Should that fail, the netdev
 * stays without rings (carrier off) until it is brought down and up again.
 */
static int sirdma_change_mtu(struct net_device *netdev, int new_mtu)
{
	bool running = netif_running(netdev);
	int err;

	if (running)
		sirdma_stop(netdev);
	WRITE_ONCE(netdev->mtu, new_mtu);
	if (!running)
		return 0;
	err = sirdma_open(netdev);
	if (err)
		netdev_err(netdev, "cannot restart its rings at MTU %d: %d\n", new_mtu, err);
	return 0;
}

static const struct net_device_ops sirdma_netdev_ops = {
	.ndo_open = sirdma_open,
	.ndo_stop = sirdma_stop,
	.ndo_change_mtu = sirdma_change_mtu,
	.ndo_start_xmit = sirdma_xmit,
	.ndo_set_mac_address = sirdma_set_mac,
	.ndo_validate_addr = eth_validate_addr,
};

int sirdma_eth_init(struct sirdma_dev *sdev)
{
	struct net_device *netdev;
	u8 mac[ETH_ALEN];
	int err;

	if (!(sdev->caps.caps & SOFTIRDMA_CAP_ETHERNET))
		return 0;
	netdev = alloc_etherdev(sizeof(struct sirdma_netdev_priv));
	if (!netdev)
		return -ENOMEM;
	((struct sirdma_netdev_priv *)netdev_priv(netdev))->sdev = sdev;
	sdev->netdev = netdev;
	spin_lock_init(&sdev->tx_lock);
	SET_NETDEV_DEV(netdev, &sdev->pdev->dev);
	netdev->netdev_ops = &sirdma_netdev_ops;
	netdev->min_mtu = ETH_MIN_MTU;
	/* Up to the function's jumbo frame: an MTU of 4096 + RoCEv2's headers or more gives the
	 * port an active MTU of 4096.
	 */
	netdev->max_mtu = SOFTIRDMA_ETH_MAX_FRAME - ETH_HLEN - VLAN_HLEN;

	/* The function's power-on MAC, as its config gave it; a random one if it has none. */
	put_unaligned_le32(sirdma_rd(sdev, SOFTIRDMA_REG_MAC_LO), mac);
	put_unaligned_le16(sirdma_rd(sdev, SOFTIRDMA_REG_MAC_HI), mac + MAC_LO_BYTES);
	if (is_valid_ether_addr(mac)) {
		eth_hw_addr_set(netdev, mac);
	} else {
		eth_hw_addr_random(netdev);
		mac_write(sdev, netdev->dev_addr);
	}
	netif_napi_add(netdev, &sdev->napi, sirdma_napi_poll);
	err = request_irq(pci_irq_vector(sdev->pdev, SOFTIRDMA_ETH_TX_VECTOR), sirdma_eth_irq, 0,
			  "softirdma-tx", sdev);
	if (err)
		goto err_napi;
	err = request_irq(pci_irq_vector(sdev->pdev, SOFTIRDMA_ETH_RX_VECTOR), sirdma_eth_irq, 0,
			  "softirdma-rx", sdev);
	if (err)
		goto err_tx_irq;
	netif_carrier_off(netdev);
	err = register_netdev(netdev);
	if (err)
		goto err_rx_irq;
	netdev_info(netdev, "softirdma Ethernet function, MAC %pM\n", netdev->dev_addr);
	return 0;

err_rx_irq:
	free_irq(pci_irq_vector(sdev->pdev, SOFTIRDMA_ETH_RX_VECTOR), sdev);
err_tx_irq:
	free_irq(pci_irq_vector(sdev->pdev, SOFTIRDMA_ETH_TX_VECTOR), sdev);
err_napi:
	netif_napi_del(&sdev->napi);
	free_netdev(netdev);
	sdev->netdev = NULL;
	return err;
}

void sirdma_eth_fini(struct sirdma_dev *sdev)
{
	if (!sdev->netdev)
		return;
	unregister_netdev(sdev->netdev);
	free_irq(pci_irq_vector(sdev->pdev, SOFTIRDMA_ETH_RX_VECTOR), sdev);
	free_irq(pci_irq_vector(sdev->pdev, SOFTIRDMA_ETH_TX_VECTOR), sdev);
	netif_napi_del(&sdev->napi);
	free_netdev(sdev->netdev);
	sdev->netdev = NULL;
}
