return {name = "sub.deep"}
