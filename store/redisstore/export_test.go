package redisstore

// SetConvListed sets the hook told how many index members each page of
// the conversation expiry read (nil: none).
func SetConvListed(f func(n int)) { convListed = f }
