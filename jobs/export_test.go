package jobs

// MaterializeDue lets tests run a materializing step on schedules read
// earlier, to put another node's change between the read and the writes.
var MaterializeDue = materializeDue
