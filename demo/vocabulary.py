"""The word lists and templates the demo training data (data.py) is generated from.

Every name, place, review word and template the held-out check uses is elsewhere (heldout.py), and
tests/demo/test_data.py checks that the two never share one.
"""

from __future__ import annotations

# --- names, places, years: sentiment and fill-mask draw from the first lists, NER and QA from all -------------

FIRST_NAMES = (
    "Sarah", "John", "Maria", "Ahmed", "Yuki", "Carlos", "Anna", "David", "Fatima", "Lukas", "Emma", "Raj",
    "Olivia", "Pierre", "Sofia", "Kenji", "Laura", "Mohammed", "Elena", "James", "Chloe", "Wei", "Hannah",
    "Diego", "Ingrid", "Tom", "Amara", "Nikolai", "Grace", "Omar", "Lucia", "Ben", "Priya", "Marco", "Aisha",
    "Jonas", "Clara", "Samuel", "Mei", "Victor", "Julia", "Hugo", "Nadia", "Felix", "Rosa", "Daniel", "Zoe",
)
LAST_NAMES = (
    "Smith", "Garcia", "Müller", "Tanaka", "Rossi", "Johnson", "Novak", "Dubois", "Kim", "Silva", "Schmidt",
    "Brown", "Kowalski", "Nguyen", "Jensen", "Lopez", "Okafor", "Ivanova", "Chen", "Wilson", "Martin",
    "Fischer", "Costa", "Patel", "Andersson", "Moreau", "Weber", "Hughes", "Sato", "Becker", "Romano",
)
CITIES = (
    "London", "Paris", "Berlin", "Madrid", "Rome", "Tokyo", "Toronto", "Sydney", "Chicago", "Boston",
    "Vienna", "Prague", "Lisbon", "Dublin", "Oslo", "Stockholm", "Warsaw", "Cairo", "Nairobi", "Mumbai",
    "Seoul", "Osaka", "Munich", "Hamburg", "Milan", "Barcelona", "Amsterdam", "Brussels", "Zurich", "Geneva",
    "Athens", "Istanbul", "Lagos", "Lima", "Bogota", "Denver", "Seattle", "Melbourne", "Copenhagen",
    "New York", "San Francisco", "Los Angeles", "Hong Kong", "Buenos Aires", "Cape Town", "Rio de Janeiro",
)
ORGANISATIONS = (
    "Google", "Microsoft", "Siemens", "Toyota", "Reuters", "Nestle", "Amazon", "Oxfam", "UNICEF", "Volvo",
    "Philips", "Samsung", "Airbus", "Nokia", "IKEA", "Intel", "Ford", "Shell", "Adidas", "Spotify",
    "General Electric", "Deutsche Bank", "Red Cross", "World Bank", "European Commission", "Oxford University",
    "Harvard University", "Bank of England", "Real Madrid", "Manchester United", "United Nations",
)
MISC_TERMS = (
    "German", "French", "Italian", "Japanese", "Spanish", "British", "American", "Brazilian", "Canadian",
    "Swedish", "Indian", "Chinese", "Dutch", "Polish", "Olympic", "Christmas", "Nobel Prize", "World Cup",
    "Tour de France", "Champions League", "Grammy", "Oscar", "English", "Arabic",
)
YEARS = tuple(range(1850, 2021))
PROFESSIONS = (
    "doctor", "teacher", "engineer", "painter", "journalist", "chemist", "architect", "pilot", "lawyer",
    "physicist", "novelist", "composer", "nurse", "photographer", "chef", "economist", "biologist",
)
SUBJECTS = (
    "the history of art", "physics", "medicine", "music", "law", "chemistry", "economics", "mathematics",
    "biology", "architecture", "literature", "philosophy",
)

# More names for NER and QA only: sentiment and fill-mask data draw from the lists above and stay as they were.
EXTRA_FIRST_NAMES = (
    "Thomas", "Lisa", "Paul", "Alice", "Mary", "Jennifer", "Emily", "Michelle", "Amanda", "Natalie", "Lauren",
    "Catherine", "Christopher", "Jason", "Ryan", "Eric", "Jonathan", "Justin", "Benjamin", "Alexander", "Nathan",
    "Adam", "Keith", "Carl", "Bruce", "Louis", "Vincent", "Hiroshi", "Olga", "Sven", "Kwame", "Leila", "Tariq",
    "Ines", "Mateo", "Freya", "Arjun", "Noor", "Pablo", "Astrid",
)
EXTRA_LAST_NAMES = (
    "Jones", "Williams", "Moore", "Jackson", "Lewis", "Scott", "Lee", "Ali", "Khan", "Singh", "Yamamoto",
    "Larsen", "Nielsen", "Hansen", "Ferreira", "Santos", "Mendes", "Popescu", "Horvath", "Kovacs", "Jansen",
    "De Vries", "Murray", "Fraser", "Russo", "Bianchi", "Ricci", "Schneider", "Wagner", "Lindqvist",
)
EXTRA_CITIES = (
    "Birmingham", "Leipzig", "Stuttgart", "Turin", "Bologna", "Casablanca", "Beijing", "Singapore", "Dubai",
    "Doha", "Kiev", "Minsk", "Vilnius", "Tallinn", "Chennai", "Bangalore", "Kolkata", "Philadelphia", "Quebec",
    "Ottawa", "Edmonton", "Perth", "Quito", "Accra", "Dakar", "Tunis", "Kampala", "Addis Ababa", "Kuala Lumpur",
)
EXTRA_ORGANISATIONS = (
    "Ericsson", "Unilever", "Vodafone", "Barclays", "HSBC", "Pfizer", "Lufthansa", "Walmart", "Tesco",
    "Carrefour", "Heineken", "BBC", "NASA", "FIFA", "Greenpeace", "Interpol", "Stanford University",
    "Cambridge University", "Sorbonne University",
)
EXTRA_MISC_TERMS = (
    "Russian", "Australian", "Swiss", "European", "African", "Asian", "Easter", "Olympics", "Super Bowl",
    "Eurovision",
)
PERSON_FIRST = FIRST_NAMES + EXTRA_FIRST_NAMES
PERSON_LAST = LAST_NAMES + EXTRA_LAST_NAMES
ENTITY_CITIES = CITIES + EXTRA_CITIES
ENTITY_ORGANISATIONS = ORGANISATIONS + EXTRA_ORGANISATIONS
ENTITY_MISC = MISC_TERMS + EXTRA_MISC_TERMS
TRAINING_POOLS = {
    "FIRST": PERSON_FIRST, "LAST": PERSON_LAST, "LOC": ENTITY_CITIES, "ORG": ENTITY_ORGANISATIONS,
    "MISC": ENTITY_MISC,
}


# --- sentiment ----------------------------------------------------------------------------------

REVIEW_SUBJECTS = (
    "movie", "film", "book", "restaurant", "hotel", "album", "show", "game", "phone", "laptop", "meal",
    "concert", "play", "series", "novel", "app", "camera", "service", "product", "coffee", "trip",
)
POSITIVE_WORDS = (
    "wonderful", "great", "excellent", "amazing", "brilliant", "fantastic", "delightful", "superb", "lovely",
    "outstanding", "enjoyable", "charming", "beautiful", "perfect", "impressive", "moving", "fun", "good",
)
NEGATIVE_WORDS = (
    "terrible", "awful", "boring", "disappointing", "dreadful", "poor", "bad", "horrible", "dull", "annoying",
    "mediocre", "painful", "weak", "messy", "unpleasant", "frustrating", "forgettable", "pointless",
)
POSITIVE_TEMPLATES = (
    "The {s} was {w}.", "What a {w} {s}!", "I loved this {s}, it was {w}.", "I really enjoyed the {s}.",
    "This {s} is {w} and I would recommend it to anyone.", "Absolutely {w}, one of the best {s}s I have seen.",
    "The {s} was {w} and the staff were friendly.", "I would happily buy this {s} again.",
    "A {w} {s} with a great ending.", "Highly recommended: a {w} {s}.", "Such a {w} {s}, I loved every minute.",
    "The {s} exceeded my expectations, truly {w}.", "Five stars, the {s} was {w}.", "I absolutely loved the {s}!",
)
NEGATIVE_TEMPLATES = (
    "The {s} was {w}.", "What a {w} {s}!", "I hated this {s}, it was {w}.", "I did not enjoy the {s} at all.",
    "This {s} is {w} and I would not recommend it to anyone.", "Truly {w}, one of the worst {s}s I have seen.",
    "The {s} was {w} and the staff were rude.", "I would never buy this {s} again.",
    "A {w} {s} with a silly ending.", "Avoid this {s}, it is {w}.", "Such a {w} {s}, a complete waste of time.",
    "The {s} fell far below my expectations, really {w}.", "One star, the {s} was {w}.", "I regret paying for the {s}.",
)


# --- named entities -----------------------------------------------------------------------------

NER_TEMPLATES = (
    "My name is {PER} and I live in {LOC} .",
    "{PER} lives in {LOC} .",
    "{PER} works for {ORG} in {LOC} .",
    "{PER} flew from {LOC} to {LOC} last week .",
    "{ORG} opened a new office in {LOC} on Monday .",
    "The {MISC} engineer {PER} joined {ORG} last year .",
    "{PER} was born in {LOC} and studied in {LOC} .",
    "Yesterday {PER} met {PER} at the {ORG} headquarters in {LOC} .",
    "{PER} won the {MISC} in {LOC} .",
    "According to {ORG} , prices in {LOC} rose again .",
    "{PER} , a spokesman for {ORG} , declined to comment .",
    "I visited {LOC} with {PER} in the summer .",
    "The {MISC} team arrived in {LOC} on Friday .",
    "{PER} told reporters in {LOC} that {ORG} would grow .",
    "She moved to {LOC} to work for {ORG} .",
    "{PER} speaks {MISC} and lives near {LOC} .",
    "Hello , I am {PER} from {LOC} .",
    "{ORG} hired {PER} as its new director .",
    # entities amid everyday words that stay O
    "{PER} listened to music in {LOC} on Sunday .",
    "On Monday , {PER} walked along the river in {LOC} .",
    "The people of {LOC} welcomed the {MISC} team in December .",
    "{PER} bought fresh bread at the market in {LOC} .",
    "Many people in {LOC} work for {ORG} .",
    "{PER} and {PER} played music together in {LOC} last May .",
    "In March , {ORG} moved its offices from {LOC} to {LOC} .",
    "{PER} , who grew up in {LOC} , now teaches music at a school .",
    "The river through {LOC} was frozen in January , {PER} said .",
    "{PER} joined the city orchestra in {LOC} in October .",
    "Thousands of people watched the {MISC} final in {LOC} .",
    "{ORG} said on Tuesday that it would hire more people in {LOC} .",
    "{PER} has worked for {ORG} since April .",
    "The {MISC} singer {PER} gave a concert in {LOC} on Saturday .",
    "{PER} spent the summer with friends in {LOC} .",
    "A report by {ORG} says that house prices in {LOC} fell in February .",
    "{PER} met the mayor of {LOC} on Wednesday .",
    "{PER} is studying {MISC} history at a university in {LOC} .",
    "Last week {PER} visited the {ORG} factory near {LOC} .",
    "Every August , {PER} travels from {LOC} to {LOC} .",
    "{PER} writes about music and film for {ORG} .",
    "The bank said {PER} would lead its office in {LOC} .",
)


# --- fill-mask ----------------------------------------------------------------------------------

CAPITALS = (
    ("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"), ("Japan", "Tokyo"),
    ("Austria", "Vienna"), ("Portugal", "Lisbon"), ("Ireland", "Dublin"), ("Norway", "Oslo"),
    ("Sweden", "Stockholm"), ("Poland", "Warsaw"), ("Egypt", "Cairo"), ("Kenya", "Nairobi"), ("Greece", "Athens"),
    ("Peru", "Lima"), ("Denmark", "Copenhagen"), ("Russia", "Moscow"), ("China", "Beijing"), ("Canada", "Ottawa"),
)
TEXT_TEMPLATES = (
    "{city} is the capital of {country}.", "The capital of {country} is {city}.",
    "{name} travelled to {city}, the capital of {country}.", "Every year many tourists visit {city} in {country}.",
    "{name} drinks a cup of coffee every morning.", "{name} reads a book before going to sleep.",
    "The children played football in the park after school.", "{name} is a {profession} who lives in {city}.",
    "It was raining, so {name} took an umbrella.", "The cat is sleeping on the sofa.",
    "{name} went to the doctor because she felt sick.", "We had dinner at a small restaurant near the river.",
    "The sun rises in the east and sets in the west.", "{name} studied {subject} at the university.",
    "The train to {city} leaves at nine in the morning.", "Water boils at one hundred degrees.",
    "She opened the window to let some fresh air in.", "The weather in {city} was cold and windy today.",
)
