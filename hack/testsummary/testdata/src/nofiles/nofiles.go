package nofiles

const X = 1
