// Package vfiouser owns the vfio-user side of the device: a server that puts a Device (any PCI
// function model) on a UNIX socket for QEMU's vfio-user-pci client, and a Client that sends
// exactly what QEMU 11.1 sends, for tests and for in-process drivers.
//
// It knows no particular device, so that the protocol can be tested against a fake and the
// device without a socket: softirdma's function is adapted to Device by hw/vfioserve.
//
// # What the server does
//
// One client at a time, and it must begin as QEMU does, with a VERSION the server accepts, whole
// within Config.HandshakeTimeout (3 s by default, inside QEMU's own 5 s wait for the reply): a
// client that says nothing, or something that is not vfio-user, gets an error reply when it
// sent a header to reply to, and is dropped, so the next client (QEMU) is served. After VERSION
// there is no deadline: QEMU may stay idle. Every message QEMU 11.1 sends is answered: VERSION (the reply no
// larger than the request: QEMU sizes its buffer from its own message), DMA_MAP (never refused
// for memory it cannot map: QEMU treats a failed map as fatal, so such memory is handed to the
// device as present but not accessible), DMA_UNMAP (exact match or unmap-all; the device hears
// of it before the memory goes), DEVICE_GET_INFO, DEVICE_GET_REGION_INFO (with QEMU's argsz
// dance and a sparse-mmap capability plus fd for regions with mmappable areas),
// DEVICE_GET_IRQ_INFO, DEVICE_SET_IRQS (eventfds in chunks; a chunk without fds deassigns;
// DATA_NONE with count 0 disables an index; mask/unmask), REGION_READ, REGION_WRITE (posted
// when the client asks for no reply), REGION_WRITE_MULTI, DEVICE_RESET. Anything else gets an
// ENOSYS error reply.
//
// The client is not trusted: every size, count, offset, index and fd count is checked before
// use, a malformed message gets an error reply (none if it asked for none; the failure is
// logged) and the connection stays up, and descriptors that came with a refused message are
// closed. When the client goes, every DMA region is unmapped (device first) and every eventfd
// closed, and the next client is served.
//
// # Locking
//
// The device's region accesses, Reset, MapDMA and UnmapDMA all arrive on the connection
// goroutine, one at a time. Trigger may be called from any goroutine: the eventfd table has its
// own lock, held while writing to an eventfd and while replacing or closing one, so a
// descriptor is never written after it is closed. DMA memory is unmapped only after
// Device.UnmapDMA returned, which is the device's promise that nothing touches it any more.
//
// # What a device must offer for QEMU 11.1 to accept it
//
//   - Description.Flags with DeviceFlagPCI (and DeviceFlagReset to get DEVICE_RESET on machine
//     reset); at most 100 regions and 50 IRQ indices. Use the PCI layout: regions 0-5 BARs,
//     6 ROM, 7 config space, 8 VGA (PCINumRegions); IRQ indices 0 INTx, 1 MSI, 2 MSI-X, 3 ERR,
//     4 REQ (PCINumIRQs). Unused regions have size 0.
//   - A config space region of 4096 bytes, readable and writable, with a real type 0 header, a
//     capability list and a PCI Express capability of type endpoint (with 256 bytes QEMU
//     treats the function as plain PCI). QEMU reads it whole at start-up.
//   - BAR sizes that are powers of two. QEMU emulates the BAR, ROM, MSI and MSI-X bits of
//     config space and the MSI-X table itself; only PBA reads reach the device, and the PBA
//     must lie inside its BAR.
//   - For MSI-X, IRQ index 2 with IRQEventfd|IRQNoResize and as many vectors as the
//     capability's table size. QEMU assigns a vector's eventfd only once MSI-X is enabled and
//     the vector unmasked; Trigger before that is a no-op. Triggering ERR (3) stops the VM and
//     REQ (4) unplugs the device.
//   - Replies within QEMU's x-msg-timeout (5 s): RegionRead must not wait on anything the
//     client does, since QEMU's vCPU may hold its big lock while waiting for the reply.
//   - Guest memory shared with the process: QEMU sends fds with DMA_MAP only for a shared
//     memory backend (-object memory-backend-memfd,share=on). Socket DMA (DMA_READ/WRITE) is
//     not used.
//
// BAR writes from QEMU are posted (no reply) unless a region is mmappable or QEMU runs with
// x-no-posted-writes; REGION_WRITE_MULTI arrives only because VERSION offers write_multiple.
package vfiouser
